"""A graph slot (csrc/runtime/graph_slot.h) plans every graph it builds: a graph allocated after another of as many
nodes and leafs, of the same sizes, computes what it computes alone, whichever tensors live at once in each. ggml's
scheduler alone reuses the last graph's plan there (ggml-alloc.c, ggml_gallocr_needs_realloc), and then b below
read 2x from a place a's plan gave to later steps: 60x instead of 32x (measured on the build before the fix)."""
from __future__ import annotations

import numpy as np
import pytest

from glm5next_runtime import _testing


@pytest.mark.parametrize("n", [1, 7, 4096])
def test_a_graph_built_after_one_of_equal_counts_computes_what_it_computes_alone(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    two, three, five = np.float32(2), np.float32(3), np.float32(5)
    a, b = _testing.one_slot_two_graphs(x)
    np.testing.assert_array_equal(a, two * ((two * x * three) * five))
    np.testing.assert_array_equal(b, two * x + (two * x * three) * five)
