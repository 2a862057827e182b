"""glm5next-convert -t N (issue 50): tensors, and the experts of stacked ones, read, dequantized and quantized by N
workers ahead of the writer, in the file's order: the same bytes for any N; and the plan logged before writing."""
from __future__ import annotations

import re

import pytest

from convert_checks import error_line, run_main


def test_any_worker_count_writes_the_same_bytes(checkpoints, tmp_path):
    from glm5next_convert import convert
    ckpt = checkpoints.make("fp8-groups", "groups", dtype="fp8")  # 16 experts per MoE layer, FP8 with block scales
    logs: list[str] = []
    outs = [convert(ckpt, tmp_path / f"t{n}.gguf", outtype="q8_0", progress=False, log=logs.append, threads=n)
            for n in (1, 3)]
    assert outs[0].read_bytes() == outs[1].read_bytes()
    plan = next(line for line in logs if line.startswith("plan: "))
    assert re.fullmatch(r"plan: \d+ tensors, [\d.]+ GiB: Q8_0 [\d.]+ GiB, .*F32 [\d.]+ GiB.* -> .*t1\.gguf", plan)


def test_a_worker_count_below_one_is_refused(checkpoints, tmp_path, capsys):
    rc, err = run_main(checkpoints.make("bad-base", dtype="f32"), tmp_path / "x.gguf", capsys, "-t", "0")
    assert rc == 1 and "-t 0: the worker threads must be >= 1" in error_line(err)
    assert not (tmp_path / "x.gguf").exists()
