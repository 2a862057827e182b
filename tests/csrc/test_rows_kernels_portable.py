"""The few-row kernels (csrc/graph/q8_0_rows_ops.cpp, float_rows_ops.cpp) are AVX-512 code for x86-64 (GCC and
Clang: <immintrin.h>, function target attributes). Built for another architecture (aarch64: Apple silicon,
Graviton), or with GLM5NEXT_NO_X86_KERNELS, they compile without it and say they are not available, and the engine
multiplies with ggml's ops as on an x86 CPU without AVX-512 (csrc/graph/rows_operands.h). There is no aarch64
compiler here: the check compiles them with the build tree's own commands (compile_commands.json) and that define,
to assembly thrown away (not -fsyntax-only: GCC reports unused functions only when it compiles), where an intrinsic
or a kernel helper left outside the guard fails."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("csrc/graph/q8_0_rows_ops.cpp", "csrc/graph/float_rows_ops.cpp")


def build_commands() -> dict[str, dict]:
    """The compile command of each kernel source from the newest build tree's compile_commands.json."""
    trees = sorted(ROOT.glob("build/*/compile_commands.json"), key=lambda p: p.stat().st_mtime)
    if not trees:
        pytest.skip("no build tree with compile_commands.json here (the package was installed from a wheel)")
    entries = json.loads(trees[-1].read_text())
    return {str(Path(e["file"]).resolve().relative_to(ROOT)): e for e in entries
            if Path(e["file"]).resolve().is_relative_to(ROOT)}


def without_x86_kernels(entry: dict) -> list[str]:
    """entry's command, to assembly thrown away, with GLM5NEXT_NO_X86_KERNELS and the warnings a left-out helper
    would raise."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c" and not a.startswith("-o"):
            out.append(a)
    return out + ["-S", "-o", os.devnull, "-DGLM5NEXT_NO_X86_KERNELS", "-Werror=unused-function",
                  "-Werror=return-type"]


@pytest.mark.parametrize("source", KERNELS)
def test_the_kernels_compile_without_x86(source):
    entry = build_commands().get(source)
    assert entry is not None, f"{source} is not in the build tree's compile commands"
    done = subprocess.run(without_x86_kernels(entry), cwd=entry["directory"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
