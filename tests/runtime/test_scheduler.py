"""One engine, many sequences (issue 24): generations on the sequences of one engine run batched, step by step, by
glm5next_runtime/scheduler.py, and each one's tokens, drafts, accepted drafts and log-probabilities equal its run
alone (Generation.run), greedy and seeded, with prompts that arrive while others decode. The bench-narrow file
(the bench preset's widths) is where a row multiplied with other rows by tinyBLAS would differ from the row alone
(tests/csrc/test_batch_invariance.py): batched rows that matched only by luck would not match there."""
from __future__ import annotations

import pytest

from conftest import random_tokens

from test_batch_invariance import SHAPE

N_BATCH = 32
# distinct prompts of different lengths: one ubatch, several ubatches (96 > 3 x N_BATCH), one token
PROMPTS = [random_tokens(20, seed=31), random_tokens(45, seed=32), random_tokens(97, seed=33), random_tokens(1, seed=34)]


@pytest.fixture(scope="module", params=["predictable-f32", "bench-narrow-q8_0"])
def gguf(request, checkpoints, predictable_gguf):
    if request.param == "predictable-f32":
        return predictable_gguf
    return checkpoints.convert(checkpoints.make("bench-narrow", "bench", dtype="f32", **SHAPE), outtype="q8_0")


def slots(gguf, n: int):
    """n Models on one engine (the server's -np slots, each with its KDA states in a cell of the engine's, as the
    server makes them), fixed draft lengths (adaptive ones depend on timings)."""
    from glm5next_runtime import Model
    first = Model(gguf, n_ctx=512, n_batch=N_BATCH, n_threads=2, draft_adaptive=False, n_seq_max=n)
    return [first] + [first.another_sequence() for _ in range(n - 1)]


def summary(result) -> tuple:
    """What a generation must reproduce: its tokens, drafts, accepted drafts and log-probabilities (exact floats)."""
    m = result.metrics
    return result.tokens, m["n_drafted"], m["n_accepted"], m["n_cached_tokens"], result.logprobs


def alone(models, kwargs_of) -> list[tuple]:
    return [summary(m.generate(p, **kwargs_of(i))) for i, (m, p) in enumerate(zip(models, PROMPTS))]


SAMPLING = {
    "greedy": lambda i: dict(temperature=0),
    "seeded": lambda i: dict(temperature=0.9, seed=100 + i),
}


LONG = 2  # PROMPTS[LONG] arrives while the others decode


@pytest.mark.parametrize("n_max", [0, 3])
@pytest.mark.parametrize("sampling", sorted(SAMPLING))
def test_each_generation_batched_equals_its_run_alone(gguf, n_max, sampling):
    from glm5next_runtime.scheduler import Scheduler
    models = slots(gguf, len(PROMPTS))

    def job(i: int):
        kwargs = SAMPLING[sampling](i) | dict(max_tokens=40 + 7 * i, spec_n_max=n_max, cache_prompt=False, logprobs=2)
        return models[i].generation(PROMPTS[i], **kwargs)

    want = [summary(job(i).run_to_end()) for i in range(len(PROMPTS))]
    scheduler = Scheduler(3 * N_BATCH).start()
    try:
        handles = {i: scheduler.submit(job(i)) for i in range(len(PROMPTS)) if i != LONG}
        next(handles[0].stream)  # decoding now: the long prompt comes in between their steps
        handles[LONG] = scheduler.submit(job(LONG))
        got = [summary(handles[i].stream.finish()) for i in range(len(PROMPTS))]
    finally:
        scheduler.close()
    assert got == want
    assert max(scheduler.rows_per_step) == len(PROMPTS)  # they did run together
    if n_max and "predictable" in gguf.name:
        assert all(g[2] > 0 for g in got)  # drafts were kept: the batched draft steps and verify passes ran


def test_a_constrained_generation_batched_equals_its_run_alone(predictable_gguf):
    """A grammar's masks reach each batched phase (draft steps under the lookahead's masks, verify rows under
    theirs): the JSON comes out as alone, beside an unconstrained generation."""
    from glm5next_runtime.scheduler import Scheduler
    models = slots(predictable_gguf, 2)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["a", "b"]}

    def job(i: int):
        constrained = dict(json_schema=schema) if i == 0 else {}
        return models[i].generation(PROMPTS[i], max_tokens=60, temperature=0, spec_n_max=3, cache_prompt=False,
                                    **constrained)

    want = [summary(job(i).run_to_end()) for i in range(2)]
    scheduler = Scheduler(3 * N_BATCH).start()
    try:
        handles = [scheduler.submit(job(i)) for i in range(2)]
        got = [summary(h.stream.finish()) for h in handles]
    finally:
        scheduler.close()
    assert got == want
    assert want[0][1] > 0  # the constrained generation drafted


def test_a_cancelled_generation_leaves_and_the_others_go_on(predictable_gguf):
    from glm5next_runtime.scheduler import Scheduler
    models = slots(predictable_gguf, 2)

    def job(i: int, max_tokens: int):
        return models[i].generation(PROMPTS[i], max_tokens=max_tokens, temperature=0, cache_prompt=False)

    want = summary(job(1, 80).run_to_end())
    scheduler = Scheduler(3 * N_BATCH).start()
    try:
        gone = scheduler.submit(job(0, 10_000))
        kept = scheduler.submit(job(1, 80))
        next(gone.stream)
        gone.cancel()
        assert gone.wait(timeout=30)
        assert list(gone.stream) == [] or gone.stream.result is None  # it ends without a result
        assert summary(kept.stream.finish()) == want
    finally:
        scheduler.close()
    assert gone.stream.result is None and len(gone.stream.tokens) < 10_000


def test_sequences_of_one_engine_keep_to_their_own_caches(predictable_gguf):
    """Graphs are kept for reuse by shape; two sequences on one engine run graphs of the same shape, each on its own
    caches (a graph kept for one must not serve the other): decoding them in turn gives each its lone logits."""
    import numpy as np
    from glm5next_runtime import Model
    a, b = slots(predictable_gguf, 2)
    lone = Model(predictable_gguf, n_ctx=512, n_batch=N_BATCH, n_threads=2)
    a.eval(PROMPTS[0])
    b.eval(PROMPTS[1])
    lone.eval(PROMPTS[0])
    for t in random_tokens(6, seed=35):
        b.eval([t])
        assert np.array_equal(a.eval([t]), lone.eval([t]))


def test_a_generation_that_fails_fails_alone_and_leaves_its_slot_whole(predictable_gguf):
    """One generation's error (here every token banned: its sampler has nothing to draw) ends that generation; the
    others batched with it go on as alone, and its slot serves the next request."""
    from glm5next_runtime.scheduler import Scheduler
    models = slots(predictable_gguf, 2)
    n_vocab = models[0].n_vocab

    def job(i: int, **extra):
        return models[i].generation(PROMPTS[i], max_tokens=30, temperature=0, spec_n_max=3, cache_prompt=False,
                                    **extra)

    want = summary(job(1).run_to_end())
    scheduler = Scheduler(N_BATCH).start()
    try:
        banned = scheduler.submit(job(0, logit_bias={t: float("-inf") for t in range(n_vocab)}))
        kept = scheduler.submit(job(1))
        with pytest.raises(RuntimeError, match="finite"):
            banned.stream.finish()
        assert summary(kept.stream.finish()) == want
        again = scheduler.submit(models[0].generation(PROMPTS[0], max_tokens=30, temperature=0, cache_prompt=True))
        assert summary(again.stream.finish()) == summary(job(0).run_to_end())
    finally:
        scheduler.close()


def test_a_sequence_made_after_another_was_freed_runs_on_its_own_caches(predictable_gguf):
    """Graphs kept for reuse are keyed by a sequence's id, not by where its caches were: a sequence whose caches
    take the freed memory of an earlier one gets no graph of that one's."""
    import gc
    from glm5next_runtime import Model
    first = slots(predictable_gguf, 1)[0]
    lone = Model(predictable_gguf, n_ctx=512, n_batch=N_BATCH, n_threads=2, draft_adaptive=False)
    want = lone.generate(PROMPTS[0], max_tokens=20, temperature=0, cache_prompt=False).tokens
    gone = first.another_sequence()
    gone.generate(PROMPTS[0], max_tokens=20, temperature=0, cache_prompt=False)
    del gone
    gc.collect()
    later = first.another_sequence()
    assert later.generate(PROMPTS[0], max_tokens=20, temperature=0, cache_prompt=False).tokens == want
