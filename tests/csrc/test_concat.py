"""The f32 concat of this project's op (csrc/graph/concat_ops.h, concat_f32): the pieces joined in order along any
dimension, the values numpy's concatenate gives and ggml's own concat gives (a copy: equal bits), also for a piece
whose rows are not contiguous (a transposed one, as KDA's conv joins its window and its rows) and on any number of
threads; pieces that do not fit are refused with an error that names them."""
from __future__ import annotations

import numpy as np
import pytest

from glm5next_runtime import _testing

# ggml sizes (ne0, ne1, ne2, ne3) of the pieces' common shape; numpy's axis of ggml dimension d is 3 - d
_NE = (5, 4, 3, 2)


def _pieces(rng, dim, sizes):
    out = []
    for n in sizes:
        ne = list(_NE)
        ne[dim] = n
        out.append(rng.standard_normal(ne[::-1], dtype=np.float32))
    return out


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
@pytest.mark.parametrize("sizes", [(1, 3), (2, 1, 4), tuple(range(1, 13))], ids=["two", "three", "past-max-src"])
def test_pieces_joined_in_order_as_ggml_and_numpy_join_them(dim, sizes):
    pieces = _pieces(np.random.default_rng(dim), dim, sizes)
    ours = _testing.concat(pieces, dim)
    np.testing.assert_array_equal(ours, np.concatenate(pieces, axis=3 - dim))
    np.testing.assert_array_equal(ours, _testing.concat(pieces, dim, ggml_kernel=True))


@pytest.mark.parametrize("n_threads", [1, 2, 3, 7])
def test_a_transposed_piece_joins_as_kda_conv_window_and_rows(n_threads):
    # KDA's conv (csrc/graph/blocks.cpp, BlockBuilder::conv): window [K-1, channels] ++ transpose(rows [channels, T])
    rng = np.random.default_rng(n_threads)
    channels, K, T = 37, 4, 9
    window = rng.standard_normal((1, 1, channels, K - 1), dtype=np.float32)
    rows = rng.standard_normal((1, 1, T, channels), dtype=np.float32)  # stored [channels, T]: joined transposed
    ours = _testing.concat([window, rows], 0, transposed=[False, True], n_threads=n_threads)
    np.testing.assert_array_equal(ours, np.concatenate([window, rows.swapaxes(-1, -2)], axis=3))
    np.testing.assert_array_equal(
        ours, _testing.concat([window, rows], 0, transposed=[False, True], ggml_kernel=True, n_threads=n_threads))


def test_one_piece_is_itself():
    (piece,) = _pieces(np.random.default_rng(0), 1, (3,))
    np.testing.assert_array_equal(_testing.concat([piece], 1), piece)


def test_pieces_that_do_not_fit_are_named():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4, 5), dtype=np.float32)
    b = rng.standard_normal((2, 3, 6, 5), dtype=np.float32)  # ne1 6, not 4: fits dim 1 only
    np.testing.assert_array_equal(_testing.concat([a, b], 1), np.concatenate([a, b], axis=2))
    with pytest.raises(ValueError, match="piece 1 has 6 in dimension 1, piece 0 4"):
        _testing.concat([a, b], 0)
