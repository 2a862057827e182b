"""The engine's KDA cells (csrc/runtime/kda_cells.h; issue 24): the KDA conv windows and recurrent states of up to
n_seq_max sequences live in one tensor per layer, so that a step over several sequences runs one conv and one gated
delta rule per KDA layer instead of one per sequence; a sequence made when every cell is taken keeps its states
itself and its rows run per sequence. Either way a row's results equal the row's alone (tests/runtime/
test_scheduler.py holds whole generations to their runs alone, with every slot in a cell)."""
from __future__ import annotations

import pytest

from conftest import random_tokens

PROMPTS = [random_tokens(20, seed=41), random_tokens(27, seed=42), random_tokens(33, seed=43)]


def engine_of(gguf, n_seq_max: int, n_seqs: int, **kwargs):
    from glm5next_runtime import Model
    first = Model(gguf, n_ctx=256, n_threads=2, n_batch=64, warmup=False, n_seq_max=n_seq_max, **kwargs)
    return [first] + [first.another_sequence() for _ in range(n_seqs - 1)]


def rounds(models, n_max: int, n_rounds: int, profile_from: int):
    """n_rounds batched draft-MTP rounds (fixed n_max) of every model's greedy generation of its prompt, the op profile
    of the rounds from `profile_from` on: (tokens emitted per model, {graph kind: {op: nodes per run}}, tokens
    emitted per round and model)."""
    from glm5next_runtime import _core
    engine = models[0].engine
    gens = [m.generator(n_max=n_max, temperature=0, seed=0) for m in models]
    batch = _core.Batch(engine)
    for g, p in zip(gens, PROMPTS):
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


def rounds_alone(gguf, i: int, n_max: int, n_rounds: int, **kwargs):
    """The tokens `rounds` emits for PROMPTS[i], its sequence alone on an engine."""
    from glm5next_runtime import _core
    (m,) = engine_of(gguf, 1, 1, **kwargs)
    g = m.generator(n_max=n_max, temperature=0, seed=0)
    batch = _core.Batch(m.engine)
    _core.Batch.start(g, PROMPTS[i], False)
    out = []
    for _ in range(n_rounds):
        batch.set([g], [1000], None)
        batch.begin()
        while batch.drafting:
            batch.draft_step()
        batch.verify()
        out += batch.emitted(0)
    return out


def kda_layers(gguf) -> int:
    from glm5next_runtime import Model
    return sum(1 for n in Model(gguf, n_ctx=64, warmup=False).hparams["head_count_kv"] if n == 0)


def test_decode_rows_of_sequences_in_cells_run_one_conv_and_one_delta_rule_per_kda_layer(predictable_gguf):
    n_kda = kda_layers(predictable_gguf)
    got, nodes, _ = rounds(engine_of(predictable_gguf, 3, 3), 0, 8, 4)
    step = nodes["decode 3 rows x 3 sequences"]
    assert step["SSM_CONV"] == n_kda and step["GATED_DELTA_NET"] == n_kda
    # the same sequences with their states of their own: one per sequence and layer
    own, nodes, _ = rounds(engine_of(predictable_gguf, 1, 3), 0, 8, 4)
    step = nodes["decode 3 rows x 3 sequences"]
    assert step["SSM_CONV"] == 3 * n_kda and step["GATED_DELTA_NET"] == 3 * n_kda
    assert got == own == [rounds_alone(predictable_gguf, i, 0, 8) for i in range(3)]


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
    """n_seq_max 2 and four sequences: two in cells, two with states of their own; a step over all four runs per
    sequence and each sequence's tokens equal its run alone. A cell given back by a freed sequence is taken again."""
    models = engine_of(predictable_gguf, 2, 3)
    assert [m.sequence.kda_cell for m in models] == [0, 1, -1]
    got, _, _ = rounds(models, 0, 6, 6)
    assert got == [rounds_alone(predictable_gguf, i, 0, 6) for i in range(3)]
    models[1].unload()
    assert models[0].another_sequence().sequence.kda_cell == 1


def test_the_load_report_counts_every_cell_once(predictable_gguf):
    """The caches an engine reports are the same whether its sequences' states are in cells or their own, and
    cells no sequence has taken are counted too (each the size of a sequence's KDA states)."""
    def caches(n_seq_max, n_seqs):
        models = engine_of(predictable_gguf, n_seq_max, n_seqs)
        m = models[0]
        kda_states = m.checkpoints()["bytes_each"] - 4 * m.hparams["n_embd"]  # a checkpoint, less its hidden row
        return sum(d["caches"] for d in m.memory()), m.sequence.cache_bytes, kda_states

    in_cells, per_seq, kda_states = caches(3, 3)
    assert kda_states > 0
    assert caches(1, 3)[:2] == (in_cells, per_seq)
    assert caches(3, 1)[0] == caches(1, 1)[0] + 2 * kda_states


def test_n_seq_max_below_one_is_refused_by_name(predictable_gguf):
    from glm5next_runtime import Model
    with pytest.raises(ValueError, match="n_seq_max = 0"):
        Model(predictable_gguf, n_ctx=64, n_seq_max=0)
