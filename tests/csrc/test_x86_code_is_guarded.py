"""Our x86-64 code (the AVX-512 few-row kernels, sparse attention's instruction-set clones) is compiled only where
graph/cpu_arch.h says so: built for another architecture (aarch64 Linux), or with GLM5NEXT_NO_X86_KERNELS, the
sources hold no x86-only code, the kernels say they are not available and the graphs use ggml's ops, as on an x86 CPU
without AVX-512. There is no aarch64 compiler here: every source of the engine (csrc/model, graph, runtime; the
bindings hold only pybind11 code) is preprocessed with the build tree's
own command (compile_commands.json) and that define, and what is left of it must hold no x86 intrinsic, vector type,
target attribute or CPU builtin; the sources with guarded code are compiled so (to assembly thrown away: GCC reports
unused functions only when it compiles), where a kernel helper or constant left outside the guard fails."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ("csrc/model/", "csrc/graph/", "csrc/runtime/")
GUARDED = ("csrc/graph/q8_0_rows_ops.cpp", "csrc/graph/float_rows_ops.cpp", "csrc/graph/sparse_attention_ops.cpp",
           "csrc/graph/mhc_ops.cpp")
# what only x86-64 compilers take: intrinsics and their vector types, target attributes, the CPU feature builtins
X86_ONLY = re.compile(r"\b_mm\d*_\w+|\b__m(128|256|512)\w*|\btarget(_clones)?\s*\(|__builtin_cpu_\w+|immintrin")


def build_commands() -> dict[str, dict]:
    """The compile command of each of our sources (relative path -> entry) from the newest build tree's
    compile_commands.json."""
    trees = sorted(ROOT.glob("build/*/compile_commands.json"), key=lambda p: p.stat().st_mtime)
    if not trees:
        pytest.skip("no build tree with compile_commands.json here (the package was installed from a wheel)")
    entries = json.loads(trees[-1].read_text())
    return {str(Path(e["file"]).resolve().relative_to(ROOT)): e for e in entries
            if Path(e["file"]).resolve().is_relative_to(ROOT / "csrc")}


def without_x86_kernels(entry: dict, *flags: str) -> list[str]:
    """entry's command without its output and -c, with GLM5NEXT_NO_X86_KERNELS and `flags`."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c" and not a.startswith("-o"):
            out.append(a)
    return out + ["-DGLM5NEXT_NO_X86_KERNELS", *flags]


def own_lines(preprocessed: str, source: str) -> list[tuple[int, str]]:
    """The lines of the preprocessor's output that come from `source` itself (not its headers), numbered as in it."""
    lines, own, number, this = [], False, 0, Path(source).resolve()
    for text in preprocessed.splitlines():
        marker = re.match(r'# (\d+) "([^"]+)"', text)
        if marker:
            number, own = int(marker.group(1)), Path(marker.group(2)).resolve() == this
            continue
        if own:
            lines.append((number, text))
        number += 1
    return lines


def test_no_source_holds_x86_only_code_without_the_x86_kernels():
    commands = build_commands()
    assert set(GUARDED) <= set(commands), "a guarded source is not in the build tree's compile commands"
    left = []
    for source, entry in sorted(commands.items()):
        if not source.startswith(ENGINE):
            continue
        done = subprocess.run(without_x86_kernels(entry, "-E"), cwd=entry["directory"], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"{source}: {done.stderr[-2000:]}"
        left += [f"{source}:{n}: {line.strip()}" for n, line in own_lines(done.stdout, entry["file"])
                 if X86_ONLY.search(line)]
    assert not left, "x86-only code outside the GLM5NEXT_X86_KERNELS guard:\n" + "\n".join(left)


@pytest.mark.parametrize("source", GUARDED)
def test_the_guarded_sources_compile_without_the_x86_kernels(source):
    entry = build_commands()[source]
    done = subprocess.run(without_x86_kernels(entry, "-S", "-o", os.devnull, "-Werror=unused-function",
                                              "-Werror=unused-variable", "-Werror=unused-const-variable=2",
                                              "-Werror=return-type"),
                          cwd=entry["directory"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
