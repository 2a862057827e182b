"""KDA's gated delta rule by this project's op (csrc/graph/delta_rule_ops.h): each element equals, bit for bit, what
ggml's gated_delta_net gives on the CPU backend (outputs and snapshot slots), and both are the delta rule of
docs/model.md (KDA), checked against a float64 recurrence written here from it."""
from __future__ import annotations

import os

import numpy as np
import pytest

from glm5next_runtime import _testing

_FLAGS = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
# The op sums as ggml_vec_dot_f32 does with AVX2 (8 lanes), or with AVX-512 (16 lanes) on a CPU that has it, as
# ggml's CPU backend built there (GGML_NATIVE) does; GLM5NEXT_CPU_KERNELS=avx2 leaves it AVX2's order alone, which
# such a ggml does not take.
_RUNS_HERE = all(f in _FLAGS for f in ("avx2", "fma")) and not (
    "avx512f" in _FLAGS and os.environ.get("GLM5NEXT_CPU_KERNELS") == "avx2")
needs_kernel_cpu = pytest.mark.skipif(not _RUNS_HERE, reason="the op sums as ggml does on AVX2 and AVX-512 CPUs")


def _inputs(rng, B, T, H, S):
    q, k, v = (rng.standard_normal((B, T, H, S), dtype=np.float32) * np.float32(0.3) for _ in range(3))
    g = rng.standard_normal((B, T, H, S), dtype=np.float32) * np.float32(0.2) - np.float32(0.3)
    beta = rng.uniform(0.0, 1.0, (B, T, H)).astype(np.float32)
    state = rng.standard_normal((B, H, S, S), dtype=np.float32) * np.float32(0.2)
    return q, k, v, g, beta, state


def _reference(q, k, v, g, beta, state, K):
    """float64, as docs/model.md, KDA, writes it: S <- diag(exp(g)) S; S += k (beta (v - S^T k))^T; o = S^T q / sqrt(d),
    with the state stored as rows j = columns of S. Returns the op's layout: outputs [T, B, H, S] flattened in
    (b, t, h, j) order, then slots 0..K-1 of [B, H, S, S] (slot s: s tokens before the last)."""
    B, T, H, S = q.shape
    out = np.zeros((B, T, H, S))
    slots = np.zeros((K, B, H, S, S))
    M = state.astype(np.float64).copy()  # [B, H, j, i] = S[i, j]
    for t in range(T):
        M *= np.exp(g[:, t].astype(np.float64))[:, :, None, :]
        delta = (v[:, t] - np.einsum("bhji,bhi->bhj", M, k[:, t])) * beta[:, t, :, None]
        M += delta[..., None] * k[:, t].astype(np.float64)[:, :, None, :]
        out[:, t] = np.einsum("bhji,bhi->bhj", M, q[:, t]) / np.sqrt(S)
        if T - 1 - t < K:
            slots[T - 1 - t] = M
    return out.reshape(-1), slots.reshape(-1)


def test_the_op_runs_where_ggml_sums_as_it_does_and_nowhere_else():
    assert _testing.delta_rule_kernel_available() == _RUNS_HERE


def test_the_load_time_check_leaves_no_openmp_team_behind():
    # A graph of 2 threads opens an OpenMP team on the calling thread that lives as long as it; a second team beside
    # the graph thread's throttled every later step (runtime/graph_threads.h): the check runs ggml on 1 thread.
    import subprocess
    import sys
    code = ("import os\nfrom glm5next_runtime import _core, _testing\nn = len(os.listdir('/proc/self/task'))\n"
            "_testing.delta_rule_kernel_available()\nprint(n, len(os.listdir('/proc/self/task')))\n")
    before, after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   timeout=120).stdout.split()
    assert after == before


@needs_kernel_cpu
@pytest.mark.parametrize("B,T,H,S,K", [(1, 1, 2, 128, 1), (4, 1, 8, 128, 1), (1, 37, 3, 128, 1), (2, 5, 2, 64, 3),
                                       (3, 2, 2, 128, 4), (1, 130, 2, 192, 1)])
def test_each_element_equals_ggml_gated_delta_net(B, T, H, S, K):
    """Decode steps of several sequences, a prompt chunk, verify passes with snapshots (T >= K and T < K), and a head
    size whose blocks of rows (16 KB: 21 rows of 192) are odd and do not divide it."""
    args = _inputs(np.random.default_rng(B * 1000 + T * 10 + K), B, T, H, S)
    ours, _ = _testing.delta_rule(*args, K=K)
    theirs, _ = _testing.delta_rule(*args, K=K, ggml_kernel=True)
    n_out = B * T * H * S
    written = min(T, K) * B * H * S * S  # slots past min(T, K) are the caller's (ggml leaves them as they were)
    assert np.array_equal(ours[:n_out + written], theirs[:n_out + written])


@needs_kernel_cpu
def test_the_op_is_the_delta_rule_of_the_spec():
    args = _inputs(np.random.default_rng(7), 2, 6, 2, 64)
    ours, _ = _testing.delta_rule(*args, K=3)
    want_out, want_slots = _reference(*args, K=3)
    n_out = want_out.size
    np.testing.assert_allclose(ours[:n_out], want_out, rtol=0, atol=1e-5 * np.abs(want_out).max())
    np.testing.assert_allclose(ours[n_out:], want_slots, rtol=0, atol=1e-5 * np.abs(want_slots).max())


def test_a_head_size_the_op_does_not_take_is_refused_by_name():
    args = _inputs(np.random.default_rng(1), 1, 2, 1, 48)
    with pytest.raises(ValueError, match="head size 48"):
        _testing.delta_rule(*args)


@needs_kernel_cpu
@pytest.mark.parametrize("B,T,K,cells", [(3, 1, 1, [4, 0, 2]), (2, 5, 3, [1, 3]), (2, 37, 1, None), (1, 2, 4, [0])])
def test_the_op_in_place_leaves_ggml_s_final_states_in_the_cells_and_no_other_row_changes(B, T, K, cells):
    """The engine's decode steps, prompt chunks and verify passes over states kept in its cells: each sequence's
    state is read from its row of the cache and replaced there by ggml's slot 0 (the state after the last token), bit
    for bit; the outputs and the snapshot slots past 0 are ggml's; rows of no sequence in the step stay as they
    were."""
    S, H = 128, 2
    rng = np.random.default_rng(B * 100 + T)
    q, k, v, g, beta, state = _inputs(rng, B, T, H, S)
    rows = max(cells) + 2 if cells else B
    cache = rng.standard_normal((rows, H, S, S), dtype=np.float32)
    at = cells if cells else list(range(B))
    cache[at] = state
    ours, after = _testing.delta_rule_in_place(q, k, v, g, beta, cache, cells, K=K)
    theirs, _ = _testing.delta_rule(q, k, v, g, beta, state, K=K, ggml_kernel=True)
    n_out, n_state = B * T * H * S, B * H * S * S
    written = min(T, K) * n_state  # slots past min(T, K) are the caller's (ggml leaves them as they were)
    assert np.array_equal(ours[:n_out], theirs[:n_out])
    assert np.array_equal(ours[n_out + n_state:n_out + written], theirs[n_out + n_state:n_out + written])
    assert np.array_equal(after[at].reshape(-1), theirs[n_out:n_out + n_state])
    others = [r for r in range(rows) if r not in at]
    assert np.array_equal(after[others], cache[others])


@needs_kernel_cpu
def test_a_cell_outside_the_cache_is_refused_by_name():
    q, k, v, g, beta, state = _inputs(np.random.default_rng(2), 2, 1, 1, 64)
    with pytest.raises(ValueError, match="cell 3 outside"):
        _testing.delta_rule_in_place(q, k, v, g, beta, state, [0, 3])
