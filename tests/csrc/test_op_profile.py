"""Engine.profile_ops / op_profile (runtime/op_profile.h): while on, every graph run is timed node by node and
counted under its kind (what the graph does, its rows, its sequences); off, nothing is kept."""
from __future__ import annotations

import pytest

from conftest import random_tokens

PROMPT = random_tokens(60, seed=3)


def runs(profile):
    return {kind: g["runs"] for kind, g in profile.items()}


def test_each_graph_run_is_counted_under_its_kind_with_its_ops_timed(predictable_gguf):
    from glm5next_runtime import Model
    m = Model(predictable_gguf, n_ctx=256, n_threads=2)
    engine = m.engine
    m.eval(PROMPT[:8])
    assert engine.op_profile() == {}  # off: nothing timed
    engine.profile_ops(True)
    m.reset()
    m.eval(PROMPT[:40])  # one ubatch
    m.eval(PROMPT[40:41])
    m.eval(PROMPT[41:42])
    profile = engine.op_profile()
    assert runs(profile) == {"prefill 40 rows": 1, "decode 1 row": 2}
    decode = profile["decode 1 row"]["ops"]
    assert {"GATED_DELTA_NET", "MUL_MAT f32", "CUSTOM"} <= set(decode)  # KDA, the f32 file's products, our ops
    assert all(ms > 0 and nodes % 2 == 0 for ms, nodes in decode.values())  # every node of both runs, timed
    engine.profile_ops(False)
    assert engine.op_profile() == {}
    m.eval(PROMPT[42:43])
    assert engine.op_profile() == {}


def test_a_step_over_several_sequences_is_its_own_kind(predictable_gguf):
    from glm5next_runtime.bench.batched import OursBatched
    batched = OursBatched(predictable_gguf, 256, 2, 64, 3)
    engine = batched.models[0].engine
    engine.profile_ops(True)
    batched.run([PROMPT[:20], PROMPT[20:40], PROMPT[40:60]], 4, None)
    kinds = runs(engine.op_profile())
    assert kinds["decode 3 rows x 3 sequences"] == 4  # one 1-row part per sequence and round
    prefill = {k: n for k, n in kinds.items() if k.startswith("prefill")}
    # the three prompts together, in ubatches the checkpoint plan cuts (runtime/checkpoint_plan.h)
    assert all(k.endswith(" rows x 3 sequences") for k in prefill)
    assert sum(int(k.split()[1]) * n for k, n in prefill.items()) == 60


def test_a_prompt_batched_with_another_sequences_verify_is_named_for_both(predictable_gguf):
    """A pass that carries one sequence's prompt rows and another's verify rows (a request arriving while another
    drafts) is neither a prefill nor a verify alone: "prefill + verify"."""
    from glm5next_runtime import Model, _core
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, spec_type="draft-mtp", draft_n_max=2, draft_adaptive=False)
    other = m.another_sequence()
    drafting = m.generator(n_max=2, temperature=0, seed=0)
    prompting = other.generator(n_max=2, temperature=0, seed=0)
    batch = _core.Batch(m.engine)

    def round_of(gens):
        batch.set(gens, [100] * len(gens), None)
        batch.begin()
        while batch.drafting:
            batch.draft_step()
        batch.verify()

    _core.Batch.start(drafting, PROMPT[:20], False)
    while drafting.prompting:
        round_of([drafting])
    round_of([drafting])
    m.engine.profile_ops(True)
    _core.Batch.start(prompting, PROMPT[20:60], False)
    round_of([drafting, prompting])
    trunk = [k for k in runs(m.engine.op_profile()) if not k.startswith("draft")]
    # (the prompt's first ubatch: as many rows as the checkpoint plan lets it take, runtime/checkpoint_plan.h)
    assert len(trunk) == 1 and trunk[0].startswith("prefill + verify ") and trunk[0].endswith(" rows x 2 sequences")


def test_one_timer_at_a_time(predictable_gguf):
    """The scheduler has one eval callback: op times and copy times are not measured at once, and asking for both
    is refused by name rather than losing one silently."""
    from glm5next_runtime import Model
    m = Model(predictable_gguf, n_ctx=64, n_threads=2)
    m.profile_traffic(True)
    with pytest.raises(ValueError, match="profile_traffic is on"):
        m.engine.profile_ops(True)
    m.profile_traffic(False)
    m.engine.profile_ops(True)
    with pytest.raises(ValueError, match="profile_ops is on"):
        m.profile_traffic(True)
    m.engine.profile_ops(False)
    m.profile_traffic(True)  # each alone is fine


def test_a_one_row_round_runs_a_one_row_decodes_graph_without_kda_snapshots(predictable_gguf):
    """A draft-MTP round without drafts is a verify pass of one row, which commit always keeps whole: it copies no
    per-row KDA snapshots (graph/trunk.cpp), so its graph has the nodes of a plain one-row decode, op for op."""
    from glm5next_runtime import Model, _core
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, warmup=False)
    engine = m.engine

    def nodes(run):
        engine.profile_ops(True)
        run()
        (graph,) = engine.op_profile().values()
        engine.profile_ops(False)
        return {op: n for op, (ms, n) in graph["ops"].items()}

    m.eval(PROMPT[:30])
    decode = nodes(lambda: m.eval(PROMPT[30:31]))
    plain = _core.Generator(m.sequence, n_max=0, temperature=0.0)
    plain.start(PROMPT[:30])
    assert nodes(plain.step) == decode
