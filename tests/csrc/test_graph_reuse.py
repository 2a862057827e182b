"""Graph reuse (csrc/runtime/graph_slot.h): a ubatch of the shape of the one before runs the graph built for that
one, with only its inputs set (positions, pools, the custom ops' n_past). Its logits and selections are those of
a graph built for it, bit for bit, wherever the step falls: inside a pool, completing one, across the bucket of
pools the indexer scores (kPoolBucket) and at the end of a context that is not a whole number of pools."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import random_tokens

N_CTX = 301  # 75 pools of 4 and one row over: the last pool never completes
PROMPT = random_tokens(5, seed=3)
# decode steps (n_past before the step) checked against a new Model: the first pool, pool ends, the bucket edge
# (the indexer scores 64 pools up to n_past 258, then 75), the end of the context
CHECKED = [5, 6, 7, 8, 100, 254, 255, 256, 258, 259, 260, 296, 298, 299, 300]


@pytest.fixture(scope="module")
def gguf(checkpoints):
    return checkpoints.convert(checkpoints.make("cache-tiny", "tiny", dtype="f32"), outtype="f32")


def new_model(path):
    from glm5next_runtime import Model
    return Model(path, n_ctx=N_CTX, n_threads=2, spec_type="none")


def step(m, token):
    logits = m.eval([token]).copy()
    return logits, {layer: m.selected_positions(layer) for layer in m.dsa_layers}


def test_a_step_on_a_kept_graph_equals_one_on_a_new_graph(gguf):
    kept = new_model(gguf)
    logits = kept.eval(PROMPT)
    checked = 0
    while kept.n_past < N_CTX:
        token = int(np.argmax(logits))
        if kept.n_past not in CHECKED:
            logits = kept.eval([token])
            continue
        fresh = new_model(gguf)
        fresh.load_state(kept.save_state())
        built = kept.graphs_built
        logits, selections = step(kept, token)
        assert kept.graphs_built == built or kept.n_past - 1 in (5, 259), "steps between bucket edges reuse"
        want_logits, want_selections = step(fresh, token)
        assert fresh.graphs_built == 1
        assert np.array_equal(logits, want_logits), f"step at n_past {kept.n_past - 1}"
        assert selections == want_selections, f"step at n_past {kept.n_past - 1}"
        checked += 1
    assert checked == len(CHECKED)


def test_decoding_builds_one_graph_per_bucket_of_pools(gguf):
    m = new_model(gguf)
    logits = m.eval(PROMPT)
    built = m.graphs_built
    for _ in range(250):  # n_past 5 -> 255: the indexer scores the first 64 pools all along
        logits = m.eval([int(np.argmax(logits))])
    assert m.graphs_built == built + 1  # the first decode step's; the other 249 reuse it
    for _ in range(10):  # 255 -> 265: pool 64 completes at n_past 259
        logits = m.eval([int(np.argmax(logits))])
    assert m.graphs_built == built + 2
