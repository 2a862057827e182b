"""The few-row f16 / f32 kernel (csrc/graph/float_rows_ops.h, issue 24): each element of its product equals, bit for
bit, what ggml's CPU backend gives the row multiplied alone (ggml_mul_mat of one row: vec_dot_f16 / vec_dot_f32),
and what ggml's row-by-row mul_mat_id gives it (the path BlockBuilder::mm took before), so a decode row, the same
row in a verify pass and in a step of several sequences agree exactly (tests/csrc/test_batch_invariance.py checks
that through the model on q8_0 and q4_0 files, whose MLA, indexer and KDA projections are f16 and whose router and
mHC projections are f32). It is ggml's reference here, not numpy: numpy only checks that it is a product."""
from __future__ import annotations

import os

import numpy as np
import pytest

from glm5next_runtime import _testing

_FLAGS = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
_KERNEL_CPU = all(f in _FLAGS for f in ("avx2", "fma", "f16c"))
# ggml's CPU backend, built for this CPU (GGML_NATIVE), sums with AVX-512 where the CPU has it: the kernel of the
# same instruction set gives its bits. GLM5NEXT_CPU_KERNELS=avx2 there leaves an AVX2 kernel that cannot match: none.
_AVX512F = _KERNEL_CPU and "avx512f" in _FLAGS
_ISA = ("" if not _KERNEL_CPU else "avx2" if not _AVX512F else
        "avx512f" if os.environ.get("GLM5NEXT_CPU_KERNELS", "native") == "native" else "")
needs_kernel = pytest.mark.skipif(not _ISA, reason="the kernel runs with AVX2, FMA and F16C, or AVX-512 F, as ggml")

# Row lengths of the bundled model's f16 and f32 matrices (48, 96: all or half past the last 64 values, which
# vec_dot_f16 adds one by one in double) and a long one with leftovers.
F16_K = [48, 96, 128, 192, 64 * 7 + 17]
F32_K = [64, 192, 768]


def _rows(rng, *shape):
    """Random f32 values whose rows differ in scale by up to 4x."""
    v = rng.standard_normal(shape, dtype=np.float32)
    return v * rng.uniform(0.25, 1.0, shape[:-1] + (1,)).astype(np.float32)


def test_the_kernel_of_the_cpus_instruction_set_runs_and_is_refused_elsewhere():
    """AVX-512 F where the CPU has it, AVX2 on the others with FMA and F16C (AMD EPYC before Zen 4); where it runs it
    also matched ggml's vec_dot on the check made once per process and type; elsewhere the op refuses by name (the
    graphs then use ggml's products: BlockBuilder::rows_kernel)."""
    for weight_type in ("f16", "f32"):
        assert _testing.float_rows_kernel_isa(weight_type) == _ISA
        assert _testing.float_rows_kernel_available(weight_type) == bool(_ISA)
    if not _ISA:
        with pytest.raises(ValueError, match="AVX2/FMA/F16C"):
            _testing.float_product(np.zeros((1, 4, 64), np.float32), np.zeros((1, 2, 64), np.float32))
    with pytest.raises(ValueError, match="weight_type"):
        _testing.float_rows_kernel_available("q8_0")


@needs_kernel
@pytest.mark.parametrize("weight_type,K", [("f16", k) for k in F16_K] + [("f32", k) for k in F32_K])
@pytest.mark.parametrize("n_rows", [1, 2, 3, 4, 5, 8, 9])
def test_each_row_of_a_product_equals_the_row_multiplied_alone(weight_type, K, n_rows):
    """Chunks of 4 rows and a last one of 1-3; M odd: the threads' shares differ."""
    rng = np.random.default_rng(n_rows * 1000 + K)
    w = _rows(rng, 1, 37, K)
    x = _rows(rng, 1, n_rows, K) * 3
    ours = _testing.float_product(w, x, weight_type=weight_type)
    alone = _testing.float_product(w, x.reshape(n_rows, 1, K), weight_type=weight_type, ggml_kernel=True)
    row_by_row = _testing.float_product(w, x, np.zeros((1, n_rows), np.int32), weight_type=weight_type,
                                        ggml_kernel=True)
    assert ours.shape == (1, n_rows, 37)
    assert np.array_equal(ours[0], alone[:, 0])
    assert np.array_equal(ours, row_by_row)
    wq = w[0].astype(np.float16).astype(np.float64) if weight_type == "f16" else w[0].astype(np.float64)
    want = x[0].astype(np.float64) @ wq.T
    np.testing.assert_allclose(ours[0], want, rtol=0, atol=0.01 * np.abs(want).max())


@needs_kernel
@pytest.mark.parametrize("weight_type,K", [("f16", 48), ("f16", 128), ("f32", 192)])
def test_a_matrix_per_head_equals_ggml_mul_mat_id(weight_type, K):
    """As BlockBuilder::mm routes a matrix per batch (MLA's k_b per head): x [K, n_head, T], head h of every token
    to matrix h."""
    rng = np.random.default_rng(K)
    n_head, T = 4, 5
    w = _rows(rng, n_head, 24, K)
    x = _rows(rng, T, n_head, K)
    ids = np.tile(np.arange(n_head, dtype=np.int32), (T, 1))
    ours = _testing.float_product(w, x, ids, weight_type=weight_type)
    theirs = _testing.float_product(w, x, ids, weight_type=weight_type, ggml_kernel=True)
    assert ours.shape == (T, n_head, 24)
    assert np.array_equal(ours, theirs)


@needs_kernel
@pytest.mark.parametrize("weight_type,K,n_x", [("f16", 192, 1), ("f16", 96, 2), ("f32", 128, 1), ("f32", 64, 3)])
def test_routed_rows_equal_ggml_mul_mat_id(weight_type, K, n_x):
    """Rows routed to several matrices, some to none, x broadcast over the ids (j % n: one row per token, or n_x
    rows for 6 routed columns, as the MoE's gate and down products take them)."""
    rng = np.random.default_rng(K + n_x)
    w = _rows(rng, 8, 19, K)
    x = _rows(rng, 7, n_x, K)
    ids = np.stack([rng.permutation(8)[:6] for _ in range(7)]).astype(np.int32)
    ours = _testing.float_product(w, x, ids, weight_type=weight_type)
    assert ours.shape == (7, 6, 19)
    assert np.array_equal(ours, _testing.float_product(w, x, ids, weight_type=weight_type, ggml_kernel=True))


@needs_kernel
def test_a_row_does_not_change_with_the_rows_beside_it():
    rng = np.random.default_rng(5)
    w = _rows(rng, 1, 64, 96)
    x = _rows(rng, 1, 11, 96)
    full = _testing.float_product(w, x)[0]
    for lo, hi in ((0, 1), (3, 5), (2, 11), (10, 11)):
        assert np.array_equal(_testing.float_product(w, np.ascontiguousarray(x[:, lo:hi]))[0], full[lo:hi])


@needs_kernel
def test_bad_operands_are_refused_by_name():
    with pytest.raises(ValueError, match="f32 with K a multiple of 64"):
        _testing.float_product(np.zeros((1, 4, 48), np.float32), np.zeros((1, 2, 48), np.float32), weight_type="f32")
    with pytest.raises(ValueError, match="without ids w holds one matrix"):
        _testing.float_product(np.zeros((2, 4, 64), np.float32), np.zeros((1, 2, 64), np.float32))
    with pytest.raises(ValueError, match="weight_type"):
        _testing.float_product(np.zeros((1, 4, 64), np.float32), np.zeros((1, 2, 64), np.float32), weight_type="bf16")
