#!/usr/bin/env python3
"""One sequence's caches here and in llama.cpp (llama-cpp-python 0.3.36) on the same file, in one run (issue 27).

    python scripts/cache_vs_llama_cpp.py [-m FILE.gguf] [-c 32768]

Without -m it writes the `real-widths` checkpoint of scripts/make_checkpoint.py (GLM-5.3-Flash's attention widths,
4 layers) and converts it to q8_0 with --arch glm5-next (llama.cpp loads that spelling), in a temporary directory
(~2.5 GB of disk while it runs, ~1 minute). Ours: Model.sequence.cache_bytes per cache type (-ctk) with
--spec-type none and draft-mtp. llama.cpp: the buffers its load log reports (the MLA KV cache, the indexer's KV
cache, the recurrent states), at its default f16 cache, with n_ctx as given.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

MIB = 1 << 20
LLAMA_BUFFERS = re.compile(r"^(\S+)\s*:\s+\S+ (KV|RS) buffer size =\s+([\d.]+) MiB", re.M)
LLAMA_LOAD = """
import sys
from llama_cpp import Llama
Llama(model_path=sys.argv[1], n_ctx=int(sys.argv[2]), n_threads=1, verbose=True)
"""


def llama_cpp_caches(path: Path, n_ctx: int) -> list[tuple[str, float]]:
    """(buffer, MiB) of every cache buffer llama.cpp's load log reports for `path` at n_ctx: the MLA KV cache, the
    indexer's KV cache (a second KV buffer) and the recurrent states (RS). Raises RuntimeError when it cannot load."""
    run = subprocess.run([sys.executable, "-c", LLAMA_LOAD, str(path), str(n_ctx)], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"llama-cpp-python cannot load {path}:\n{run.stderr[-2000:]}")
    found = LLAMA_BUFFERS.findall(run.stderr)
    names = iter(["MLA KV cache", "indexer KV cache"])
    return [(f"{next(names, 'KV cache')}" if kind == "KV" else "recurrent states", float(mib)) for _, kind, mib in found]


def ours(path: Path, n_ctx: int) -> list[tuple[str, float]]:
    """(setting, MiB) of one sequence's caches per cache type and speculation."""
    from glm5next_runtime import Model
    from glm5next_runtime.cache_sizes import CACHE_TYPES
    out = []
    for spec_type in ("none", "draft-mtp"):
        for cache_type in CACHE_TYPES:
            m = Model(path, n_ctx=n_ctx, n_threads=1, spec_type=spec_type, cache_type_k=cache_type)
            out.append((f"-ctk {cache_type}, --spec-type {spec_type}", m.sequence.cache_bytes / MIB))
            del m
    return out


def real_widths_file(tmp: Path) -> Path:
    import make_checkpoint
    from glm5next_convert import convert
    ckpt = tmp / "real-widths"
    make_checkpoint.main([str(ckpt), "--preset", "real-widths"])
    return convert(ckpt, tmp / "real-widths-q8_0.gguf", outtype="q8_0", arch="glm5-next", progress=False,
                   log=lambda m: None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", type=Path, help="a GGUF converted with --arch glm5-next (default: real-widths)")
    p.add_argument("-c", "--ctx-size", type=int, default=32768)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = a.model or real_widths_file(Path(tmp))
        upstream = llama_cpp_caches(path, a.ctx_size)
        mine = ours(path, a.ctx_size)
    total = sum(mib for _, mib in upstream)
    print(f"{path.name}, n_ctx {a.ctx_size}: one sequence's caches\n")
    print("| engine, setting | caches (MiB) | / llama.cpp |\n| --- | ---: | ---: |")
    print(f"| llama.cpp (f16: {', '.join(f'{n} {mib:.2f}' for n, mib in upstream)}) | {total:.2f} | 1.00 |")
    for setting, mib in mine:
        print(f"| glm5next {setting} | {mib:.2f} | {mib / total:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
