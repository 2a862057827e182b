#!/usr/bin/env bash
# Create (or reuse) the dev venv and build glm5next into it. Idempotent: a
# re-run only reinstalls what changed and rebuilds the C++ incrementally
# (scikit-build-core keeps its CMake tree in build/).
#   VENV=path   venv location (default: .venv at the repo root)
#   PYTHON=exe  interpreter used to create the venv (default: python3, >= 3.11)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip install --quiet)

"${pip[@]}" --upgrade pip
# torch first and pinned: an unpinned (or transitive) torch resolves to the
# CUDA build and downloads GBs; the test extra pins the same version.
"${pip[@]}" torch==2.13.0
# Built from source on first install (5-15 min on 2 cores), then served from
# pip's wheel cache. It provides the ggml headers/libs our extension links to.
if ! "$VENV/bin/python" -m pip show --quiet llama-cpp-python 2>/dev/null; then
    echo "setup.sh: building llama-cpp-python from source, this takes a while..." >&2
fi
"${pip[@]}" llama-cpp-python==0.3.36
# --no-build-isolation: the build must see this venv's llama-cpp-python (ggml),
# so the build backend has to be installed here, not in a throwaway env.
"${pip[@]}" "scikit-build-core>=0.11" "pybind11>=2.13"
# Editable (redirect mode): Python edits apply without reinstalling, while
# _core is installed into site-packages where its RUNPATH to llama_cpp/lib holds.
# A C++ change needs a re-run of this script.
"${pip[@]}" --no-build-isolation -e ".[test]"
