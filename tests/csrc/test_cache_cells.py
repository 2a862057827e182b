"""The engine's cache cells (csrc/runtime/cache_cells.h; issue 24): the trunk caches of up to n_seq_max sequences
are cells of one tensor per layer and kind, so that a step over several sequences writes their cache rows and pools
their indexer keys once per layer, and runs one conv and one gated delta rule per KDA layer, instead of once per
sequence; a sequence made when every cell is taken keeps caches of its own and its rows run per sequence. Either way
a row's results equal the row's alone (tests/runtime/test_scheduler.py holds whole generations to their runs alone,
with every slot in a cell)."""
from __future__ import annotations

import pytest

from conftest import random_tokens

PROMPTS = [random_tokens(20, seed=41), random_tokens(27, seed=42), random_tokens(33, seed=43)]


def engine_of(gguf, n_seq_max: int, n_seqs: int, **kwargs):
    from glm5next_runtime import Model
    first = Model(gguf, n_ctx=256, n_threads=2, n_batch=64, warmup=False, n_seq_max=n_seq_max, **kwargs)
    return [first] + [first.another_sequence() for _ in range(n_seqs - 1)]


def rounds(models, n_max: int, n_rounds: int, profile_from: int, prompts=PROMPTS):
    """n_rounds batched draft-MTP rounds (fixed n_max) of every model's greedy generation of its prompt, the op profile
    of the rounds from `profile_from` on: (tokens emitted per model, {graph kind: {op: nodes per run}}, tokens
    emitted per round and model)."""
    from glm5next_runtime import _core
    engine = models[0].engine
    gens = [m.generator(n_max=n_max, temperature=0, seed=0) for m in models]
    batch = _core.Batch(engine)
    for g, p in zip(gens, prompts):
        _core.Batch.start(g, p, False)
    out, per_round = [[] for _ in models], []
    for r in range(n_rounds):
        if r == profile_from:
            engine.profile_ops(True)
        batch.set(gens, [1000] * len(gens), None)
        batch.begin()
        while batch.drafting:
            batch.draft_step()
        batch.verify()
        per_round.append([len(batch.emitted(i)) for i in range(len(gens))])
        for i in range(len(gens)):
            out[i] += batch.emitted(i)
    profile = engine.op_profile()
    engine.profile_ops(False)
    nodes = {kind: {op: n // g["runs"] for op, (ms, n) in g["ops"].items()} for kind, g in profile.items()}
    return out, nodes, per_round


def rounds_alone(gguf, i: int, n_max: int, n_rounds: int, prompts=PROMPTS, **kwargs):
    """The tokens `rounds` emits for prompts[i], its sequence alone on an engine."""
    return rounds(engine_of(gguf, 1, 1, **kwargs), n_max, n_rounds, n_rounds, prompts=[prompts[i]])[0][0]


def kda_layers(gguf) -> int:
    from glm5next_runtime import Model
    return sum(1 for n in Model(gguf, n_ctx=64, warmup=False).hparams["head_count_kv"] if n == 0)


def test_decode_rows_of_sequences_in_cells_write_their_caches_and_run_kda_once_per_layer(predictable_gguf):
    n_kda = kda_layers(predictable_gguf)
    _, nodes, _ = rounds(engine_of(predictable_gguf, 1, 1), 0, 8, 4)
    alone_step = nodes["decode 1 row"]  # its DSA cache writes (set_rows); its KDA states are copied (cpy)
    got, nodes, _ = rounds(engine_of(predictable_gguf, 3, 3), 0, 8, 4)
    step = nodes["decode 3 rows x 3 sequences"]
    assert step["SSM_CONV"] == n_kda and step["GATED_DELTA_NET"] == n_kda
    # one write per cache tensor for all three, and per KDA layer one of the windows and one of the states
    assert step["SET_ROWS"] == alone_step["SET_ROWS"] + 2 * n_kda
    # the same sequences with their states of their own: one per sequence and layer
    own, nodes, _ = rounds(engine_of(predictable_gguf, 1, 3), 0, 8, 4)
    step = nodes["decode 3 rows x 3 sequences"]
    assert step["SSM_CONV"] == 3 * n_kda and step["GATED_DELTA_NET"] == 3 * n_kda
    assert got == own == [rounds_alone(predictable_gguf, i, 0, 8) for i in range(3)]


def test_parts_of_unequal_rows_in_cells_write_their_caches_at_once_and_run_kda_per_sequence(predictable_gguf):
    """Three short prompts in one few-row group (5, 9 and 12 rows, in prompt ubatches the checkpoint plan cuts: the
    last 4 rows of each apart, runtime/checkpoint_plan.h): the step of unequal parts writes the cache rows of all
    three with one set_rows per tensor and runs KDA per sequence (one conv and gated delta rule take sequences of
    equal rows), the step of 4 rows each runs KDA once; every sequence's tokens equal its run alone."""
    n_kda = kda_layers(predictable_gguf)
    short = [PROMPTS[0][:5], PROMPTS[1][:9], PROMPTS[2][:12]]
    _, nodes, _ = rounds(engine_of(predictable_gguf, 1, 1), 0, 3, 2)
    dsa_writes = nodes["decode 1 row"]["SET_ROWS"]
    got, nodes, _ = rounds(engine_of(predictable_gguf, 3, 3), 0, 6, 0, prompts=short)
    prefill = {kind: ops for kind, ops in nodes.items() if kind.startswith("prefill")}
    assert sorted(prefill) == ["prefill 12 rows x 3 sequences", "prefill 14 rows x 3 sequences"]
    unequal, equal = prefill["prefill 14 rows x 3 sequences"], prefill["prefill 12 rows x 3 sequences"]
    assert unequal["SSM_CONV"] == 3 * n_kda and unequal["SET_ROWS"] == dsa_writes
    assert equal["SSM_CONV"] == n_kda and equal["SET_ROWS"] == dsa_writes + 2 * n_kda
    assert got == [rounds_alone(predictable_gguf, i, 0, 6, prompts=short) for i in range(3)]


def test_verify_passes_over_cells_roll_back_each_sequence_to_its_own_row(predictable_gguf):
    """Verify passes of equal rows run as one gated delta rule per KDA layer whose per-row states hold every
    sequence's; a rollback takes each sequence's state and window after its own last kept row. Draft lengths are
    fixed (3) and the rounds both keep and reject drafts (the predictable preset's drafts are mostly right)."""
    n_kda = kda_layers(predictable_gguf)
    spec = dict(spec_type="draft-mtp", draft_n_max=3, draft_adaptive=False)
    got, nodes, per_round = rounds(engine_of(predictable_gguf, 3, 3, **spec), 3, 12, 2)
    verify = [ops for kind, ops in nodes.items() if kind.startswith("verify") and kind.endswith("x 3 sequences")]
    assert verify and all(ops["GATED_DELTA_NET"] == n_kda for ops in verify)
    # rounds of all four rows where the second or third sequence kept fewer: rolled back from a shared pass
    assert any(0 < n[i] < 4 for n in per_round[2:] for i in (1, 2))
    assert got == [rounds_alone(predictable_gguf, i, 3, 12, **spec) for i in range(3)]


def test_sequences_made_when_every_cell_is_taken_keep_their_states_themselves(predictable_gguf):
    """n_seq_max 2 and three sequences: two in cells, one with caches of its own; a step over all three runs per
    sequence and each sequence's tokens equal its run alone. A cell given back by a freed sequence is taken again."""
    models = engine_of(predictable_gguf, 2, 3)
    assert [m.sequence.cache_cell for m in models] == [0, 1, -1]
    got, _, _ = rounds(models, 0, 6, 6)
    assert got == [rounds_alone(predictable_gguf, i, 0, 6) for i in range(3)]
    models[1].unload()
    assert models[0].another_sequence().sequence.cache_cell == 1


def test_the_load_report_counts_every_cell_once(predictable_gguf):
    """The caches an engine reports are the same whether its sequences' caches are cells or their own, and cells no
    sequence has taken count as what a sequence's caches take (without the NextN layer's, spec_type none: cells
    hold the trunk's)."""
    def caches(n_seq_max, n_seqs):
        models = engine_of(predictable_gguf, n_seq_max, n_seqs, spec_type="none")
        return sum(d["caches"] for d in models[0].memory()), models[0].sequence.cache_bytes

    in_cells, per_seq = caches(3, 3)
    assert caches(1, 3) == (in_cells, per_seq)
    assert caches(3, 1) == (caches(1, 1)[0] + 2 * per_seq, per_seq)


def test_n_seq_max_below_one_is_refused_by_name(predictable_gguf):
    from glm5next_runtime import Model
    with pytest.raises(ValueError, match="n_seq_max = 0"):
        Model(predictable_gguf, n_ctx=64, n_seq_max=0)
