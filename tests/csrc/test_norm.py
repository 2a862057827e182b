"""RMSNorm and KDA's L2 normalization by this project's op (csrc/graph/norm_ops.h): the bits ggml's RMS_NORM, MUL and
SCALE give (the devices run those: placed models keep the CPU's logits), for rows of any size, with and without the
norm's weight, for rows that are not contiguous with each other (views), on any thread count and whatever rows sit
beside a row (batch invariance); the formula of docs/model.md to float32 precision; a weight that does not fit is
refused with an error naming it."""
from __future__ import annotations

import numpy as np
import pytest

from glm5next_runtime import _testing

SIZES = [1, 15, 16, 17, 31, 128, 1027]


def _rows(rng, n0, shape=(2, 3, 5)):
    # magnitudes far apart from row to row, as hidden states and KDA's heads are
    scale = 10.0 ** rng.uniform(-3, 3, shape + (1,))
    return (rng.standard_normal(shape + (n0,)) * scale).astype(np.float32)


@pytest.mark.parametrize("n0", SIZES)
@pytest.mark.parametrize("kind", ["rms", "rms with weight", "l2"])
def test_the_bits_ggmls_ops_give(n0, kind):
    rng = np.random.default_rng(n0)
    x = _rows(rng, n0)
    kw = {"rms": {}, "rms with weight": {"w": rng.standard_normal(n0).astype(np.float32)}, "l2": {"l2": True}}[kind]
    np.testing.assert_array_equal(_testing.norm_rows(x, eps=1e-5, **kw),
                                  _testing.norm_rows(x, eps=1e-5, ggml_kernel=True, **kw))


@pytest.mark.parametrize("n0", [16, 128])
def test_the_formula_of_the_model(n0):
    rng = np.random.default_rng(1)
    x, w = _rows(rng, n0), rng.standard_normal(n0).astype(np.float32)
    x64 = x.astype(np.float64)
    rms = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * w
    l2 = x64 / np.sqrt((x64 ** 2).sum(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(_testing.norm_rows(x, w=w, eps=1e-5), rms, rtol=1e-6, atol=1e-6 * np.abs(w).max())
    np.testing.assert_allclose(_testing.norm_rows(x, l2=True), l2, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("l2", [False, True])
def test_rows_that_are_not_contiguous_with_each_other(l2):
    # a view's rows (KDA's per-head q and k in the conv output, its output rows in the recurrence's packed result)
    rng = np.random.default_rng(2)
    wide = _rows(rng, 48)
    w = None if l2 else rng.standard_normal(40).astype(np.float32)
    np.testing.assert_array_equal(_testing.norm_rows(wide, w=w, l2=l2, n0=40),
                                  _testing.norm_rows(wide[..., :40].copy(), w=w, l2=l2))


@pytest.mark.parametrize("n_threads", [1, 2, 3, 7])
def test_a_rows_bits_do_not_depend_on_the_rows_beside_it_or_the_threads(n_threads):
    rng = np.random.default_rng(n_threads)
    x, w = _rows(rng, 131, (3, 4, 6)), rng.standard_normal(131).astype(np.float32)
    together = _testing.norm_rows(x, w=w, n_threads=n_threads)
    for i3, i2, i1 in [(0, 0, 0), (1, 2, 5), (2, 3, 3)]:
        alone = _testing.norm_rows(x[i3:i3 + 1, i2:i2 + 1, i1:i1 + 1].copy(), w=w, n_threads=1)
        np.testing.assert_array_equal(together[i3, i2, i1], alone[0, 0, 0])


def test_a_weight_that_does_not_fit_is_refused_by_name():
    with pytest.raises(ValueError, match=r"rms_norm_f32: w \(f32, 7 values\) is not contiguous f32 of x's row size 8"):
        _testing.norm_rows(np.ones((1, 1, 2, 8), np.float32), w=np.ones(7, np.float32))
