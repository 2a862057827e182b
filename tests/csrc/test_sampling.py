"""The sampler (csrc/runtime/sampling.cpp through _core.Sampler): greedy, the filter chain against a NumPy reference,
seeded reproducibility, the empirical distribution of draws, and speculative accept / resample keeping the
target distribution exactly.

Statistical checks use Pearson's chi-square over the support with a fixed seed and 20k draws, against the 0.999
quantile: a correct sampler fails one for a given seed with probability 1e-3, and the seeds are fixed, so the
tests are deterministic."""
from __future__ import annotations

import numpy as np
import pytest

from glm5next_runtime._core import Sampler

N_DRAWS = 20_000
CHI2_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322, 8: 26.124, 9: 27.877}

# 10 logits in no particular id order, so that the sort inside the sampler matters.
LOGITS = np.array([-0.4, 2.0, -2.5, 1.2, 0.0, -1.0, 1.5, -4.0, 0.3, -1.7], np.float32)
OFF = dict(top_k=0, top_p=1.0, min_p=0.0)


def reference(logits: np.ndarray, temperature: float, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """The documented chain (llama.cpp's order) in float64: top_k, top_p, min_p on softmax(logits), each on the
    survivors of the previous one renormalized (ties by lower id), then softmax(logits / T) over the survivors."""
    p = np.exp(logits.astype(np.float64) - logits.max())
    p /= p.sum()
    keep = np.lexsort((np.arange(len(logits)), -logits))  # most probable first, equal logits by lower id
    if 0 < top_k < len(logits):
        keep = keep[:top_k]
    if top_p < 1.0:
        cum = np.cumsum(p[keep] / p[keep].sum())
        keep = keep[:np.searchsorted(cum, top_p) + 1]  # the shortest prefix whose sum reaches top_p
    if min_p > 0.0:
        keep = keep[p[keep] >= min_p * p[keep].max()]
    tempered = np.exp((logits[keep].astype(np.float64) - logits.max()) / temperature)
    out = np.zeros_like(p)
    out[keep] = tempered / tempered.sum()
    return out


def chi2_ok(tokens: list[int], p: np.ndarray) -> tuple[bool, float]:
    """Whether the draws fit p: none outside p's support, chi-square below the 0.999 quantile."""
    counts = np.bincount(tokens, minlength=len(p))
    support = p > 0
    assert counts[~support].sum() == 0, f"drew tokens {np.flatnonzero(counts * ~support)} that have p = 0"
    expected = len(tokens) * p[support]
    stat = float(((counts[support] - expected) ** 2 / expected).sum())
    return stat < CHI2_999[int(support.sum()) - 1], stat


def test_greedy_is_argmax_with_ties_to_lowest_id():
    rng = np.random.default_rng(0)
    for temperature in (0.0, -1.0):
        s = Sampler(temperature=temperature, seed=0)
        for _ in range(50):
            logits = rng.integers(-3, 4, 448).astype(np.float32)  # many exact ties at the maximum
            assert s.sample(logits) == int(np.argmax(logits))  # np.argmax: first (lowest) index of the maximum
            p = s.distribution(logits)
            assert p.dtype == np.float32 and p.shape == (448,)
            assert p[np.argmax(logits)] == 1.0 and p.sum() == 1.0


SETTINGS = [
    dict(temperature=1.0, **OFF),
    dict(temperature=2.5, **OFF),
    dict(temperature=0.7, top_k=4, top_p=1.0, min_p=0.0),
    dict(temperature=1.3, top_k=0, top_p=0.8, min_p=0.0),
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1),
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),  # the defaults
    dict(temperature=1.5, top_k=7, top_p=0.9, min_p=0.05),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_distribution_is_the_filtered_softmax(settings):
    got = Sampler(**settings, seed=0).distribution(LOGITS)
    np.testing.assert_allclose(got, reference(LOGITS, **settings), atol=1e-6)
    assert abs(float(got.sum()) - 1.0) < 1e-6


@pytest.mark.parametrize("settings", [SETTINGS[0], SETTINGS[-1]], ids=["unfiltered", "all-filters"])
def test_draws_follow_the_distribution(settings):
    s = Sampler(**settings, seed=1234)
    ok, stat = chi2_ok([s.sample(LOGITS) for _ in range(N_DRAWS)], reference(LOGITS, **settings))
    assert ok, f"chi-square {stat:.2f}"


def test_each_filter_removes_what_it_should():
    probs = np.array([0.05, 0.3, 0.1, 0.4, 0.15])  # ids by probability: 3, 1, 4, 2, 0
    logits = np.log(probs).astype(np.float32)

    def support(**kw) -> set[int]:
        return set(np.flatnonzero(Sampler(**{"temperature": 1.0, **OFF, **kw}).distribution(logits)).tolist())

    assert support() == {0, 1, 2, 3, 4}
    assert support(top_k=2) == {3, 1}
    assert support(top_k=1) == {3}
    assert support(top_k=99) == {0, 1, 2, 3, 4}  # more than the vocab: off
    assert support(top_p=0.75) == {3, 1, 4}       # 0.4 + 0.3 < 0.75 <= 0.85
    assert support(top_p=0.1) == {3}
    assert support(min_p=0.3) == {3, 1, 4}        # p >= 0.3 * 0.4 = 0.12
    assert support(min_p=1.0) == {3}
    # top_p sees top_k's survivors renormalized: of {3, 1, 4}, 3 and 1 hold 0.7 / 0.85 = 0.82 >= 0.8 ...
    assert support(top_k=3, top_p=0.8) == {3, 1}
    # ... where over the whole vocabulary they hold 0.7 < 0.8
    assert support(top_p=0.8) == {3, 1, 4}


def test_temperature_applies_after_the_filters():
    probs = np.array([0.5, 0.3, 0.2])
    logits = np.log(probs).astype(np.float32)
    # min_p sees the untempered 0.2 >= 0.35 * 0.5, so the token survives at T = 0.5 too (where p ~ probs^2 would
    # have dropped it: 0.04 < 0.35 * 0.25), and temperature then sharpens the survivors.
    for t in (1.0, 0.5):
        p = Sampler(temperature=t, top_k=0, top_p=1.0, min_p=0.35).distribution(logits)
        assert p[2] > 0
        assert np.allclose(p, probs ** (1 / t) / (probs ** (1 / t)).sum(), rtol=1e-5)


def test_masked_logits_get_zero_probability():
    logits = LOGITS.copy()
    logits[[1, 6]] = -np.inf
    p = Sampler(temperature=1.0, **OFF).distribution(logits)
    assert p[1] == 0 and p[6] == 0
    np.testing.assert_allclose(p, reference(logits, 1.0, **OFF), atol=1e-6)


def test_same_seed_same_tokens_and_other_seed_other_tokens():
    def draws(seed: int) -> list[int]:
        s = Sampler(temperature=1.0, **OFF, seed=seed)
        return [s.sample(LOGITS) for _ in range(200)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)  # equal with probability far below 1e-30
    assert Sampler(seed=None).seed != Sampler(seed=None).seed  # None draws a fresh seed, readable back
    assert Sampler(seed=42).seed == 42


def test_sample_draws_from_distribution_with_the_same_rng():
    # sample(l) is sample_from(distribution(l)): one seed gives the same tokens either way, which the
    # speculative round relies on to make "no draft" and "draft rejected" runs comparable.
    a, b = Sampler(temperature=1.2, top_k=6, top_p=0.95, min_p=0.02, seed=5), Sampler(
        temperature=1.2, top_k=6, top_p=0.95, min_p=0.02, seed=5)
    assert [a.sample(LOGITS) for _ in range(300)] == [b.sample_from(b.distribution(LOGITS)) for _ in range(300)]


def speculative_draws(s: Sampler, p: np.ndarray, q: np.ndarray, n: int) -> list[int]:
    """One speculative step n times: draft d ~ q, accept with min(1, p(d)/q(d)), else resample the residual."""
    out = []
    for _ in range(n):
        d = s.sample_from(q)
        out.append(d if s.accept_draft(p, q, d) else s.sample_residual(p, q))
    return out


def distributions() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(10)).astype(np.float32), rng.dirichlet(np.ones(10)).astype(np.float32)
    p_holes, q_holes = p.copy(), q.copy()
    p_holes[[0, 4]] = 0  # target excludes tokens the draft proposes
    q_holes[[2, 7]] = 0  # draft never proposes tokens the target wants
    one_hot = np.zeros(10, np.float32)
    one_hot[int(np.argmin(p))] = 1  # a draft that always proposes the target's least likely token
    # the real use: target and draft rows of similar logits through the same sampler settings
    target = Sampler(temperature=0.9, top_k=8, top_p=0.95, min_p=0.05).distribution(LOGITS)
    draft = Sampler(temperature=0.9, top_k=8, top_p=0.95, min_p=0.05).distribution(
        LOGITS + rng.normal(0, 0.7, 10).astype(np.float32))
    return {"dense": (p, q), "holes": (p_holes / p_holes.sum(), q_holes / q_holes.sum()), "one-hot-draft": (p, one_hot),
            "equal": (p, p.copy()), "filtered": (target, draft)}


@pytest.mark.parametrize("case", list(distributions()))
def test_speculative_accept_and_resample_keep_the_target_distribution(case):
    p, q = distributions()[case]
    ok, stat = chi2_ok(speculative_draws(Sampler(seed=99), p, q, N_DRAWS), p.astype(np.float64) / p.sum())
    assert ok, f"chi-square {stat:.2f}"


def test_accept_draft_and_residual_edges():
    s = Sampler(seed=0)
    p = np.array([0.5, 0.3, 0.2, 0.0], np.float32)
    q = np.array([0.2, 0.3, 0.4, 0.1], np.float32)
    assert all(s.accept_draft(p, q, 0) for _ in range(100))      # p >= q: always
    assert all(s.accept_draft(p, q, 1) for _ in range(100))
    assert not any(s.accept_draft(p, q, 3) for _ in range(100))  # p = 0: never
    assert {s.sample_residual(p, q) for _ in range(100)} == {0}  # max(p - q, 0) is nonzero at 0 only
    assert {s.sample_residual(p, p) for _ in range(300)} == {0, 1, 2}  # residual all zero: falls back to p
    # greedy p and q (one-hot): accept iff the draft is the target's argmax; the residual is the target's argmax
    g = Sampler(temperature=0)
    tp, dq = g.distribution(np.float32([0, 3, 1])), g.distribution(np.float32([2, 0, 1]))
    assert g.accept_draft(tp, tp, 1) and not g.accept_draft(tp, dq, 0)
    assert g.sample_residual(tp, dq) == 1


def test_accept_rate_is_min_of_ratio():
    s = Sampler(seed=11)
    p, q = np.array([0.2, 0.8], np.float32), np.array([0.5, 0.5], np.float32)
    rate = np.mean([s.accept_draft(p, q, 0) for _ in range(N_DRAWS)])
    assert abs(rate - 0.4) < 4 * np.sqrt(0.4 * 0.6 / N_DRAWS)  # 4 sigma


F32 = np.zeros(5, np.float32)


@pytest.mark.parametrize("kwargs", [dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.01), dict(min_p=-0.1),
                                    dict(min_p=1.5), dict(temperature=float("nan")), dict(seed=-1),
                                    dict(seed=2 ** 64), dict(seed=1.5)])
def test_bad_settings_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        Sampler(**kwargs)


@pytest.mark.parametrize("call", [
    lambda s: s.sample(np.zeros(5, np.float64)),
    lambda s: s.sample(np.zeros((1, 5), np.float32)),
    lambda s: s.sample(np.zeros(0, np.float32)),
    lambda s: s.sample([0.0, 1.0]),
    lambda s: s.sample(np.float32([0, np.nan, 1])),
    lambda s: s.sample(np.full(3, -np.inf, np.float32)),
    lambda s: s.sample(np.float32([0, np.inf])),
    lambda s: s.distribution(np.zeros(5, np.int32)),
    lambda s: s.sample_from(F32),
    lambda s: s.accept_draft(F32 + 0.2, np.zeros(6, np.float32), 0),
    lambda s: s.accept_draft(F32 + 0.2, F32 + 0.2, 5),
    lambda s: s.accept_draft(F32 + 0.2, F32 + 0.2, -1),
    lambda s: s.sample_residual(F32 + 0.2, np.zeros(4, np.float32)),
    lambda s: s.sample_residual(F32 + 0.2, (F32 + 0.2).astype(np.float64)),
], ids=["float64", "2-D", "empty", "list", "nan", "all-masked", "inf", "int32", "no-mass", "size-mismatch",
        "token-high", "token-negative", "residual-size", "residual-dtype"])
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call(Sampler(seed=0))


def test_strided_logits_are_read_correctly():
    wide = np.repeat(LOGITS, 2)  # a view of every other element is LOGITS itself, but not contiguous
    s = Sampler(temperature=1.0, **OFF)
    np.testing.assert_array_equal(s.distribution(wide[::2]), s.distribution(LOGITS))
