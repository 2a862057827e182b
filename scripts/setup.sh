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
# llama-cpp-python provides the ggml headers/libs our extension links to. It is
# built from source (5-15 min on 2 cores) with ggml's RPC backend plus whatever
# the caller adds, e.g. CMAKE_ARGS="-DGGML_CUDA=ON" for a CUDA build.
# pip's own wheel cache does not key on CMAKE_ARGS (a cached CPU-only wheel
# would be reused silently), so the wheel is built into a wheelhouse named by
# a hash of the CMake arguments, and the venv records which build it holds.
LLAMA_CPP_VERSION=0.3.36
# On x86 without AMX code: ggml's AMX weight repack (compiled in by -march=native on CPUs with AMX) makes
# llama.cpp 0.3.36 abort on glm5-next q8_0 files (GGML_ASSERT(*cur_backend_id != -1) in ggml_backend_sched while
# placing a node that reads a repacked weight), and llama.cpp is our conformance and speed reference.
no_amx=""
if [ "$(uname -m)" = x86_64 ]; then
    no_amx="-DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'"
fi
LLAMA_CMAKE_ARGS="-DGGML_RPC=ON${no_amx:+ $no_amx}${CMAKE_ARGS:+ $CMAKE_ARGS}"
build_key="$(printf '%s %s' "$LLAMA_CPP_VERSION" "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-16)"
wheelhouse="${GLM5NEXT_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/glm5next/wheels}/$build_key"
marker="$VENV/.llama-cpp-build"
if [ "$(cat "$marker" 2>/dev/null)" != "$build_key" ]; then
    if ! ls "$wheelhouse"/llama_cpp_python-*.whl >/dev/null 2>&1; then
        echo "setup.sh: building llama-cpp-python $LLAMA_CPP_VERSION ($LLAMA_CMAKE_ARGS), this takes a while..." >&2
        mkdir -p "$wheelhouse"
        CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$VENV/bin/python" -m pip wheel --quiet --no-deps \
            --no-cache-dir --no-binary llama-cpp-python -w "$wheelhouse.partial" \
            "llama-cpp-python==$LLAMA_CPP_VERSION"
        mv "$wheelhouse.partial"/llama_cpp_python-*.whl "$wheelhouse"/ && rm -rf "$wheelhouse.partial"
    fi
    "${pip[@]}" --force-reinstall --no-deps "$wheelhouse"/llama_cpp_python-*.whl
    "${pip[@]}" "llama-cpp-python==$LLAMA_CPP_VERSION"   # its own dependencies
    echo "$build_key" > "$marker"
fi
# --no-build-isolation: the build must see this venv's llama-cpp-python (ggml),
# so the build backend has to be installed here, not in a throwaway env.
"${pip[@]}" "scikit-build-core>=0.11" "pybind11>=2.13"
# Editable (redirect mode): Python edits apply without reinstalling, while
# _core is installed into site-packages where its RUNPATH to llama_cpp/lib holds.
# A C++ change needs a re-run of this script.
# The test helpers module (_testing) is built for this development environment only.
"${pip[@]}" --no-build-isolation --config-settings=cmake.define.GLM5NEXT_TEST_HELPERS=ON -e ".[test]"
