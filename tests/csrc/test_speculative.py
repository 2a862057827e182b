"""draft-MTP speculation (docs/runtime.md, draft-MTP round): greedy output is token-identical to plain decoding for
every n_max, rounds accept 0..n drafts, the trunk's KDA state after generation equals serial decoding's, and
sampling keeps the target distribution.

The "predictable" preset makes the NextN head mostly agree with the trunk (random heads never do), so that
rounds really accept drafts at every position."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import random_tokens


def generator(model, **kw):
    return model.generator(**kw)


def run(model, prompt, max_tokens, **kw):
    g = generator(model, **kw)
    out = [g.start(prompt)]
    while len(out) < max_tokens and g.room > 0:
        out += g.step()
    return out[:max_tokens], g.stats


@pytest.fixture(scope="module", params=["f32", "q8_0"])
def model(request, checkpoints):
    """Fixed draft lengths (draft_adaptive=False): the claims below count drafts per position and round outcomes,
    and adaptive lengths follow this machine's timings (tests/csrc/test_draft_length.py tests those)."""
    from glm5next_runtime import Model
    ckpt = checkpoints.make("spec-predictable", "predictable", dtype="f32")
    return Model(checkpoints.convert(ckpt, outtype=request.param), n_ctx=512, n_threads=2, draft_adaptive=False)


PROMPT = random_tokens(80, seed=7)  # index_topk is 16: the prompt alone is 5x past it
PROMPTS = [PROMPT] + [random_tokens(80, seed=s) for s in (9, 11, 13)]


@pytest.mark.parametrize("n_max", [1, 2, 3, 4, 5])
def test_greedy_output_equals_plain_decoding(model, n_max):
    rounds_with = np.zeros(n_max + 1, int)  # rounds that accepted exactly j drafts, over all prompts
    for prompt in PROMPTS:
        plain, _ = run(model, prompt, 220, n_max=0, temperature=0.0)
        spec, stats = run(model, prompt, 220, n_max=n_max, temperature=0.0)
        assert spec == plain
        drafted, accepted = stats["drafted_at"], stats["accepted_at"]
        rounds_with += [drafted[0] - accepted[0]] + [accepted[j - 1] - accepted[j] for j in range(1, n_max)] + [accepted[-1]]
    assert all(rounds_with > 0), rounds_with  # every outcome of a round occurred: 0, 1, ..., n_max accepted


@pytest.mark.parametrize("cache_type", ["f32", "bf16", "q8_0", "q4_0"])
def test_greedy_output_equals_plain_decoding_with_every_cache_type(checkpoints, cache_type):
    """-ctk: verify rows read the same cache rows as decode rows, whatever their type (f16, the default, is the
    other tests')."""
    from glm5next_runtime import Model
    ckpt = checkpoints.make("spec-predictable", "predictable", dtype="f32")
    m = Model(checkpoints.convert(ckpt, outtype="q8_0"), n_ctx=512, n_threads=2, draft_adaptive=False,
              cache_type_k=cache_type)
    for prompt in PROMPTS[:2]:
        plain, _ = run(m, prompt, 120, n_max=0, temperature=0.0)
        spec, stats = run(m, prompt, 120, n_max=3, temperature=0.0)
        assert spec == plain and stats["accepted_at"][0] > 0


def test_greedy_output_is_the_same_with_and_without_index_sharing(model):
    on, _ = run(model, PROMPT, 200, n_max=3, index_share="on", temperature=0.0)
    off, _ = run(model, PROMPT, 200, n_max=3, index_share="off", temperature=0.0)
    assert on == off


def test_kda_state_after_generation_equals_serial_decoding(model):
    from glm5next_runtime import Model

    run(model, PROMPT, 150, n_max=4, temperature=0.0)
    engine = model.sequence
    serial = Model(model.path, n_ctx=512, n_threads=2)
    for t in engine.tokens:
        serial.eval([t])
    assert serial.n_past == engine.n_past
    kda_layers = [il for il, kv in enumerate(model.hparams["head_count_kv"][: model.hparams["n_trunk"]]) if kv == 0]
    for il in kda_layers:
        a, b = engine.kda_state(il), serial.sequence.kda_state(il)
        assert np.abs(a["conv"] - b["conv"]).max() <= 1e-5
        assert np.abs(a["state"] - b["state"]).max() <= 1e-5


def test_metrics(model):
    _, stats = run(model, PROMPT, 60, n_max=3, temperature=0.0)
    assert stats["n_prompt_tokens"] == len(PROMPT)
    assert stats["n_drafts"] > 0 and 0 < stats["n_accepted"] <= stats["n_drafted"]
    assert len(stats["acceptance_per_position"]) == 3
    assert stats["mean_accepted_length"] == pytest.approx((stats["n_accepted"] + stats["n_drafts"]) / stats["n_drafts"])
    assert stats["draft_ms"] > 0 and stats["verify_ms"] > 0


@pytest.mark.parametrize("spec_sampling", ["match", "rejection"])
def test_sampling_keeps_the_target_distribution(checkpoints, spec_sampling):
    """The first two generated tokens, over many seeds, with speculation: their joint frequencies match the exact
    distribution the trunk defines under the same sampler (top_k 3, temperature 0.8), by a chi-square test; with
    either rule for keeping sampled drafts (llama.cpp's match, or speculative sampling's rejection)."""
    from scipy.stats import chisquare

    from glm5next_runtime import Model, _core

    # one thread: a tiny model's graphs are too small to share, and 3000 short generations add up; fixed draft
    # lengths: an adaptive policy may judge drafting unprofitable on so small a model and never draft
    model = Model(checkpoints.convert(checkpoints.make("spec-predictable", "predictable", dtype="f32"),
                                      outtype="f32"), n_ctx=256, n_threads=1, spec_sampling=spec_sampling,
                  draft_adaptive=False)
    prompt = random_tokens(40, seed=8)
    settings = dict(temperature=0.8, top_k=3, top_p=1.0, min_p=0.0)
    dist = _core.Sampler(**settings, seed=0)
    p1 = dist.distribution(model.eval(prompt))
    exact = {}
    for a in np.flatnonzero(p1):
        model.reset()
        p2 = dist.distribution(model.eval(prompt + [int(a)]))
        for b in np.flatnonzero(p2):
            exact[(int(a), int(b))] = p1[a] * p2[b]
    n = 3000
    counts = dict.fromkeys(exact, 0)
    accepted = 0
    for seed in range(n):
        toks, stats = run(model, prompt, 2, n_max=2, seed=seed, **settings)
        counts[tuple(toks)] += 1
        accepted += stats["n_accepted"]
    assert accepted > n // 4  # drafts were accepted often, so both the accept and the reject paths ran
    keys = sorted(exact)
    expected = np.array([exact[k] for k in keys], dtype=np.float64)
    result = chisquare([counts[k] for k in keys], expected / expected.sum() * n)
    assert result.pvalue > 1e-3, (result, counts, exact)


@pytest.mark.parametrize("temperature", [0.3, 0.8, 1.5])
def test_seeded_sampling_emits_plain_decodings_tokens_under_match(model, temperature):
    """spec_sampling "match" (llama.cpp's rule, llama-server's behaviour): a seeded sampled generation with drafts emits
    the tokens the same seed gives without drafts (llama-server's test_with_and_without_draft), drafts being kept. The
    same seeds under "rejection" (the default) keep the distribution but not the tokens: that is what this rule is
    for."""
    from glm5next_runtime import Model
    model = Model(model.path, n_ctx=512, n_threads=2, draft_adaptive=False, spec_sampling="match")
    settings = dict(temperature=temperature, top_k=40, top_p=0.95, min_p=0.05)
    accepted = 0
    for seed, prompt in enumerate(PROMPTS):
        plain, _ = run(model, prompt, 120, n_max=0, seed=seed, **settings)
        spec, stats = run(model, prompt, 120, n_max=3, seed=seed, **settings)
        assert spec == plain, seed
        accepted += stats["n_accepted"]
    assert accepted >= 10  # drafts were kept, not only rejected


def test_speculation_needs_a_nextn_layer(checkpoints):
    from glm5next_runtime import Model

    path = checkpoints.convert(checkpoints.make("spec-no-nextn", "tiny", nextn=False), outtype="f32")
    with pytest.raises(ValueError, match="NextN"):
        generator(Model(path, n_ctx=128, n_threads=2), n_max=3)


def test_p_min_stops_drafting(model):
    """A draft whose own top probability (softmax of its logits, even when decoding greedily) is below p_min
    ends the round's drafting: with p_min = 1 nothing is ever drafted."""
    free, stats = run(model, PROMPT, 40, n_max=3, temperature=0.0)
    none, stopped = run(model, PROMPT, 40, n_max=3, p_min=1.0, temperature=0.0)
    assert none == free
    assert stats["n_drafted"] > 0 and stopped["n_drafted"] == 0


@pytest.mark.parametrize("max_tokens", [2, 3, 5])
def test_drafts_are_capped_by_the_tokens_the_request_may_still_produce(model, max_tokens):
    """A round emits its accepted drafts and one token of the target's: it drafts no more than the reply can still
    take, so every draft counted served the reply (issue 13: max_tokens 2 with n_max 3 used to draft 3)."""
    r = model.generate(PROMPT, max_tokens=max_tokens, temperature=0, spec_n_max=3, cache_prompt=False)
    m = r.metrics
    assert len(r.tokens) == max_tokens
    assert m["n_accepted"] + m["n_drafts"] <= max_tokens - 1  # the tokens of the rounds that drafted
    assert m["n_drafted"] <= max_tokens - 2 if max_tokens > 2 else m["n_drafted"] == 0


def test_a_long_prompts_draft_head_rows_are_written_a_ubatch_at_a_time_as_it_is_evaluated(checkpoints):
    """Issue 51: a prompt's draft-head rows (the trunk's hidden state of each row, 16 KiB per token on GLM-5.3-Flash)
    are written as its ubatches are evaluated, not held to the first round: a 200-token prompt in ubatches of 16 holds
    fewer than two ubatches of them at any time, alone (Generator.start) and batched (_core.Batch), and emits plain
    decoding's tokens both ways."""
    from glm5next_runtime import Model, _core
    ckpt = checkpoints.make("spec-predictable", "predictable", dtype="f32")
    m = Model(checkpoints.convert(ckpt, outtype="f32"), n_ctx=512, n_threads=2, n_batch=16, draft_adaptive=False)
    prompt = random_tokens(200, seed=21)
    plain, _ = run(m, prompt, 40, n_max=0, temperature=0.0)
    alone, stats = run(m, prompt, 40, n_max=3, temperature=0.0)
    assert alone == plain and 0 < stats["pending_rows_max"] < 2 * 16

    g = m.generator(n_max=3, temperature=0.0)
    _core.Batch.start(g, prompt, False)
    batch, out = _core.Batch(m.engine), []
    while len(out) < 40:
        batch.set([g], [40 - len(out)], None)
        batch.begin()
        while batch.drafting:
            batch.draft_step([None])
        batch.verify([None])
        out += batch.emitted(0)
    g.finish()
    assert out[:40] == plain and 0 < g.stats["pending_rows_max"] < 2 * 16 and g.stats["n_accepted"] > 0
