"""Log-probabilities of generated tokens (csrc/runtime/token_probs.h; OpenAI's logprobs, llama-server's n_probs):
the log softmax of the raw logits of the target row that produced each token, checked against the trunk's own
logits (Model.eval), the same with draft-MTP on and off (the verify pass has the rows), and sorted."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import random_tokens

PROMPT = random_tokens(40, seed=4)
N_TOP = 4


@pytest.fixture(scope="module")
def model(predictable_gguf):
    from glm5next_runtime import Model
    return Model(predictable_gguf, n_ctx=256, n_threads=2)


def run(model, n_max: int, n: int = 16, post_sampling_probs: bool = False, **sampler) -> tuple[list[int], list[tuple]]:
    """Generated ids and their probs entries, n tokens."""
    g = model.generator(n_max=n_max, n_probs=N_TOP, post_sampling_probs=post_sampling_probs,
                        **({"temperature": 0} | sampler))
    tokens = [g.start(PROMPT)]
    probs = list(g.probs)
    while len(tokens) < n:
        emitted = g.step(n - len(tokens))
        assert len(g.probs) == len(emitted)
        tokens += emitted
        probs += g.probs
    return tokens, probs


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("n_max", [0, 3])
def test_logprobs_are_the_trunks_log_softmax_at_each_position(model, n_max):
    tokens, probs = run(model, n_max)
    model.reset()
    want = log_softmax(model.eval(PROMPT + tokens[:-1], logits_all=True)[len(PROMPT) - 1:])
    for i, (token, logprob, top) in enumerate(probs):
        assert token == tokens[i]
        assert logprob == pytest.approx(want[i, token], abs=1e-4)
        ids = [t for t, _ in top]
        assert ids == sorted(range(want.shape[1]), key=lambda t: (-want[i, t], t))[:N_TOP]
        assert [lp for _, lp in top] == pytest.approx(want[i, ids], abs=1e-4)


def test_a_greedy_tokens_logprob_is_the_top_logprob(model):
    _, probs = run(model, 3)
    for token, logprob, top in probs:
        assert top[0] == (token, logprob)
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)


def test_logprobs_are_the_same_with_and_without_speculation(model):
    plain_tokens, plain = run(model, 0, n=24)
    spec_tokens, spec = run(model, 3, n=24)
    assert spec_tokens == plain_tokens
    for a, b in zip(plain, spec):
        assert a[0] == b[0] and a[1] == pytest.approx(b[1], abs=1e-5)
        assert [t for t, _ in a[2]] == [t for t, _ in b[2]]


def test_sampled_tokens_get_their_own_logprob(model):
    """A sampled token need not be the most probable: its entry is its own log-probability (before the sampler's
    filters and temperature)."""
    tokens, probs = run(model, 3, n=24, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=11)
    model.reset()
    want = log_softmax(model.eval(PROMPT + tokens[:-1], logits_all=True)[len(PROMPT) - 1:])
    assert any(token != top[0][0] for token, _, top in probs)  # the test means something
    for i, (token, logprob, _) in enumerate(probs):
        assert logprob == pytest.approx(want[i, token], abs=1e-4)


def test_no_probs_unless_asked(model):
    g = model.generator(n_max=3, temperature=0)
    g.start(PROMPT)
    g.step()
    assert g.probs == []


# ------------------------------------------------------------------------------------------ Model.generate

def test_generate_gives_each_generated_token_its_generator_entry(model):
    tokens, probs = run(model, 3, n=16)
    result = model.generate(PROMPT, max_tokens=16, temperature=0, logprobs=N_TOP)
    assert result.tokens == tokens
    assert [e.token for e in result.logprobs] == tokens
    for entry, (token, logprob, top) in zip(result.logprobs, probs):
        assert entry.logprob == pytest.approx(logprob, abs=1e-6)
        assert [t for t, _ in entry.top] == [t for t, _ in top]
        assert [lp for _, lp in entry.top] == pytest.approx([lp for _, lp in top], abs=1e-6)


def test_generate_logprobs_0_gives_the_tokens_own_logprob_and_no_top(model):
    result = model.generate(PROMPT, max_tokens=8, temperature=0, logprobs=0)
    assert len(result.logprobs) == 8 and all(e.top == [] and e.logprob <= 0 for e in result.logprobs)


def test_a_stream_shows_the_entries_of_every_token_fed_so_far(model):
    stream = model.generate(PROMPT, max_tokens=16, temperature=0, logprobs=2, stream=True)
    seen = []
    for _ in stream:
        assert [e.token for e in stream.logprobs] == stream.tokens
        seen.append(len(stream.logprobs))
    assert seen == sorted(seen) and stream.result.logprobs is stream.logprobs and len(stream.logprobs) == 16


def test_the_tokens_that_spell_a_stop_string_keep_their_entries(model):
    full = model.generate(PROMPT, max_tokens=16, temperature=0)
    stop = model.detokenize(full.tokens[5:7])
    cut = model.generate(PROMPT, max_tokens=16, temperature=0, stop=stop, logprobs=1)
    assert cut.finish_reason == "stop" and stop not in cut.text
    assert [e.token for e in cut.logprobs] == cut.tokens and len(cut.tokens) < 16


def test_no_logprobs_unless_asked_and_a_negative_count_is_refused(model):
    assert model.generate(PROMPT, max_tokens=4, temperature=0).logprobs is None
    assert model.generate(PROMPT, max_tokens=4, temperature=0, stream=True).logprobs is None
    with pytest.raises(ValueError, match="logprobs = -1"):
        model.generate(PROMPT, max_tokens=4, logprobs=-1)


@pytest.mark.parametrize("n_max, spec_sampling", [(0, None), (3, "match"), (3, "rejection")])
def test_post_sampling_probs_are_the_samplers_distribution_at_each_position(model, predictable_gguf, n_max,
                                                                            spec_sampling):
    """llama-server's post_sampling_probs: the distribution the token was drawn from (top_k 3, temperature 1.5),
    with draft-MTP on and off (under spec_sampling "match", whose seeded tokens are plain decoding's, the same
    entries); its top holds only the tokens that survived the filters."""
    from glm5next_runtime import Model, _core
    settings = dict(temperature=1.5, top_k=3, top_p=1.0, min_p=0.0)
    if spec_sampling is not None:
        model = Model(predictable_gguf, n_ctx=256, n_threads=2, spec_sampling=spec_sampling)
    tokens, probs = run(model, n_max, 24, post_sampling_probs=True, seed=7, **settings)
    if spec_sampling == "match":
        assert (tokens, probs) == run(model, 0, 24, post_sampling_probs=True, seed=7, **settings)
    model.reset()
    rows = model.eval(PROMPT + tokens[:-1], logits_all=True)[len(PROMPT) - 1:]
    dist = _core.Sampler(**settings, seed=0)
    for i, (token, logprob, top) in enumerate(probs):
        p = dist.distribution(rows[i])
        assert 0 < p[token] and np.exp(logprob) == pytest.approx(p[token], abs=1e-5)
        ids = [t for t, _ in top]
        assert ids == sorted(np.flatnonzero(p).tolist(), key=lambda t: (-p[t], t))[:N_TOP] and len(ids) == 3
        assert np.exp([lp for _, lp in top]) == pytest.approx(p[ids], abs=1e-5)
        assert sum(np.exp(lp) for _, lp in top) == pytest.approx(1.0, abs=1e-5)
