"""The few-row q8_0 kernel (csrc/graph/q8_0_rows_ops.h, issue 24): each element of its product equals, bit for bit,
what ggml's CPU backend gives the row multiplied alone (ggml_mul_mat of one row: vec_dot), so a decode row, the
same row in a verify pass and in a step of several sequences agree exactly (tests/csrc/test_batch_invariance.py
checks that through the model). It is ggml's reference here, not numpy: numpy only checks that it is a product."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glm5next_runtime import _testing

_FLAGS = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
# one kernel for AVX-512 F/BW/VL/VNNI, one for AVX2 with FMA and F16C (AMD EPYC before Zen 4)
_KERNEL_CPU = all(f in _FLAGS for f in ("avx2", "fma", "f16c"))
_AVX512_VNNI = _KERNEL_CPU and all(f in _FLAGS for f in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni"))
# GLM5NEXT_CPU_KERNELS=avx2: this file's run in a process of its own, below
_ISA = ("avx512vnni" if _AVX512_VNNI and os.environ.get("GLM5NEXT_CPU_KERNELS", "native") == "native" else
        "avx2" if _KERNEL_CPU else "")
needs_kernel_cpu = pytest.mark.skipif(not _KERNEL_CPU, reason="the kernel needs AVX2, FMA and F16C")


def _rows(rng, *shape, scale_by_row=True):
    """Random f32 values whose rows differ in scale by up to 4x (q8_0 scales per block)."""
    v = rng.standard_normal(shape, dtype=np.float32)
    return v * rng.uniform(0.25, 1.0, shape[:-1] + (1,)).astype(np.float32) if scale_by_row else v


def test_the_kernel_runs_where_the_cpu_has_avx2_and_is_refused_elsewhere():
    """Where it runs it also matched ggml's vec_dot on the check made once per process; elsewhere the op refuses
    by name (the graphs then use ggml's products: BlockBuilder::rows_kernel)."""
    assert _testing.q8_0_rows_kernel_available() == _KERNEL_CPU
    assert _testing.q8_0_rows_kernel_isa() == _ISA
    if not _KERNEL_CPU:
        with pytest.raises(ValueError, match="AVX2"):
            _testing.q8_0_product(np.zeros((1, 4, 32), np.float32), np.zeros((1, 2, 32), np.float32))


@needs_kernel_cpu
@pytest.mark.parametrize("n_rows,M", [(1, 37), (2, 37), (3, 37), (4, 37), (5, 37), (6, 37), (7, 37), (8, 37), (9, 37),
                                      (16, 37), (17, 37), (33, 37), (5, 1), (9, 2)])
def test_each_row_of_a_product_equals_the_row_multiplied_alone(n_rows, M):
    """M odd: the threads' shares differ; M 1 or 2: a thread with no rows."""
    rng = np.random.default_rng(n_rows * 100 + M)
    w = _rows(rng, 1, M, 32 * 45)
    x = _rows(rng, 1, n_rows, 32 * 45)
    ours = _testing.q8_0_product(w, x)
    alone = _testing.q8_0_product(w, x.reshape(n_rows, 1, -1), ggml_kernel=True)  # one row per product: vec_dot
    assert ours.shape == (1, n_rows, M)
    assert np.array_equal(ours[0], alone[:, 0])
    want = x[0].astype(np.float64) @ w[0].T.astype(np.float64)
    np.testing.assert_allclose(ours[0], want, rtol=0, atol=0.02 * np.abs(want).max())


@needs_kernel_cpu
@pytest.mark.parametrize("n_x", [1, 4])
@pytest.mark.parametrize("T", [1, 4, 13])
def test_routed_experts_equal_ggml_mul_mat_id(n_x, T):
    """As the MoE calls it: gate and up over x [K, 1, T], down over x [K, k, T], k experts per token."""
    _routed_experts_equal_ggml(T, n_x, n_expert=6, k=4, K=32 * 17, M=19)


@needs_kernel_cpu
def test_routed_experts_of_a_prompt_ubatch_equal_ggml_mul_mat_id():
    """A 512-row prompt ubatch over 16 experts (the MoE takes the kernel at any row count: BlockBuilder::mm_id)."""
    _routed_experts_equal_ggml(512, 4, n_expert=16, k=4, K=1024, M=64)


@needs_kernel_cpu
def test_weight_rows_of_several_tiles_against_several_chunks_equal_ggml_mul_mat_id():
    """Each thread's 75 weight rows of K = 1024 span two tiles (~64 KB: 60 rows), each against 4 chunks of 8 rows
    of x, the last partial (29 rows routed to each expert)."""
    _routed_experts_equal_ggml(29, 1, n_expert=2, k=2, K=1024, M=150)


def _routed_experts_equal_ggml(T, n_x, n_expert, k, K, M):
    rng = np.random.default_rng(10 * T + n_x)
    w = _rows(rng, n_expert, M, K)
    x = _rows(rng, T, n_x, K)
    ids = np.stack([rng.permutation(n_expert)[:k] for _ in range(T)]).astype(np.int32)
    ours = _testing.q8_0_product(w, x, ids)
    theirs = _testing.q8_0_product(w, x, ids, ggml_kernel=True)
    assert ours.shape == (T, k, M)
    assert np.array_equal(ours, theirs)


@needs_kernel_cpu
def test_a_row_does_not_change_with_the_rows_beside_it():
    rng = np.random.default_rng(5)
    w = _rows(rng, 1, 64, 32 * 8)
    x = _rows(rng, 1, 12, 32 * 8)
    full = _testing.q8_0_product(w, x)[0]
    for lo, hi in ((0, 1), (3, 5), (2, 11), (11, 12)):
        assert np.array_equal(_testing.q8_0_product(w, np.ascontiguousarray(x[:, lo:hi]))[0], full[lo:hi])


@needs_kernel_cpu
def test_bad_shapes_are_refused_by_name():
    with pytest.raises(ValueError, match="K must be a multiple of 32"):
        _testing.q8_0_product(np.zeros((1, 4, 40), np.float32), np.zeros((1, 2, 40), np.float32))
    with pytest.raises(ValueError, match="without ids w holds one matrix"):
        _testing.q8_0_product(np.zeros((2, 4, 32), np.float32), np.zeros((1, 2, 32), np.float32))


def _in_process_with(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=os.environ | env, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=600)


@needs_kernel_cpu
@pytest.mark.skipif(os.environ.get("GLM5NEXT_CPU_KERNELS") == "avx2", reason="the run this test makes")
def test_the_avx2_kernel_passes_this_files_tests_on_an_avx512_cpu_too():
    """GLM5NEXT_CPU_KERNELS=avx2 makes the process choose the AVX2 kernel where the CPU has AVX-512 (it otherwise runs
    only on CPUs without it, AMD EPYC before Zen 4): this file's tests, run so in a process of their own, test it on
    whatever machine runs them."""
    run = _in_process_with({"GLM5NEXT_CPU_KERNELS": "avx2"}, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(Path(__file__)))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout


def test_an_unknown_cpu_kernels_setting_is_refused_by_name():
    run = _in_process_with({"GLM5NEXT_CPU_KERNELS": "sse4"}, "-c",
                           "from glm5next_runtime import _testing; _testing.q8_0_rows_kernel_isa()")
    assert run.returncode != 0 and 'GLM5NEXT_CPU_KERNELS = "sse4": expected "native" or "avx2"' in run.stderr
