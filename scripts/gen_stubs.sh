#!/usr/bin/env bash
# Regenerates glm5next_runtime/_core.pyi (type stubs with the docstrings of the native module) from the built
# extension. Run after changing a binding; tests/runtime/test_stubs.py fails while the committed stub is stale.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"${VENV:-.venv}/bin/pybind11-stubgen" glm5next_runtime._core -o "$out" >/dev/null
cp "$out/glm5next_runtime/_core.pyi" glm5next_runtime/_core.pyi
