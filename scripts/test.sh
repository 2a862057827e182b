#!/usr/bin/env bash
# Build via setup.sh, then run pytest (all tests, slow ones included).
# Arguments are passed to pytest, e.g. scripts/test.sh -m "not slow" tests/x.py
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
rc=0
"${VENV:-.venv}/bin/python" -m pytest -q "$@" || rc=$?
# 5 = no tests collected; not a failure (e.g. a -k filter that matches nothing).
if [ "$rc" -eq 5 ]; then rc=0; fi
exit "$rc"
