"""Adaptive draft lengths (csrc/runtime/draft_length.h; issue 15, speculation that never loses): the policy drafts
nothing when drafts are rejected and cost time, n_max when they are accepted and cheap, probes its way back to
drafting when the text becomes predictable, and a Generator that follows it keeps greedy output and the draft
head's rows exactly as with fixed lengths."""
from __future__ import annotations

import pytest

from conftest import random_tokens

# Timings (ms) of the bundled model at -t 1 (q8_0): a decode step ~1.0, each further verify row ~+0.35, a draft step
# ~0.18 (glm5next-bench --spec-n-max; tests/csrc/test_draft_length.py's rounds only need their ratios).
STEP = 0.18


def verify_ms(rows):
    return 1.0 + 0.35 * (rows - 1)


def policy(n_max=3, n_min=0, opened=True):
    """A new policy; opened: past its opening, the rounds without drafts that time plain decoding (here 1.0 ms)."""
    from glm5next_runtime import _core
    p = _core.DraftLengthPolicy(n_max, n_min)
    if opened:
        assert play(p, lambda j: True, 3) == [0, 0, 0]
    return p


def play(p, accept, rounds, limit=3, step=STEP):
    """`rounds` rounds in which draft j is accepted iff accept(j); returns the lengths the policy chose."""
    chosen = []
    for _ in range(rounds):
        k = p.choose(limit)
        chosen.append(k)
        n_acc = next((j - 1 for j in range(1, k + 1) if not accept(j)), k)
        p.observe(k, n_acc, k + 1, n_acc + 1, step, step * max(k - 1, 0), verify_ms(k + 1))
    return chosen


def test_a_new_policy_times_plain_decoding_before_it_drafts():
    """Three rounds without drafts open a policy's life (kTrusted timed ones): drafting is then weighed against plain
    decoding as measured, not as extrapolated from verify passes of several rows by the prior's slope; then, with
    nothing known of acceptance, one draft (the prior's 0.5 makes a draft pay at these costs)."""
    p = policy(opened=False)
    assert p.expected_cost(0) == pytest.approx(1.05)  # the prior: one verify row (1) and a deferred draft-head row
    for _ in range(3):
        assert p.choose(3) == 0
        p.observe(0, 0, 1, 0, 0.0, 0.0, 4.0)  # plain decoding takes 4 ms here
    assert p.expected_cost(0) == pytest.approx(4.2)  # measured, and the prior's deferred row scaled to it
    assert p.choose(3) == 1 and p.acceptance(1) == pytest.approx(0.5)


def test_a_calibrated_prior_keeps_a_new_policy_from_drafting_where_verify_rows_cost_a_decode_step():
    """The same opening as above, with a prior measured where a verify row costs ~0.9 of a round without drafts (the
    bench preset q8_0 on a CPU): a draft at the prior's acceptance of 0.5 then loses, and the policy does not draft
    before its probes measure acceptance (issue 28). The prior is in units of plain decoding, scaled to its timing."""
    from glm5next_runtime import _core
    prior = _core.RoundCostPrior(verify=[1.0, 1.9, 2.8, 3.7], first=0.15, next=0.1)
    p = _core.DraftLengthPolicy(3, 0, prior)
    assert p.prior.verify == [1.0, 1.9, 2.8, 3.7]
    for _ in range(3):
        assert p.choose(3) == 0
        p.observe(0, 0, 1, 0, 0.0, 0.0, 4.0)
    assert p.expected_cost(1) == pytest.approx(4.0 * (0.15 + 1.9))
    assert p.expected_cost(3) == pytest.approx(4.0 * (0.15 + 2 * 0.1 + 3.7))
    assert [p.choose(3) for _ in range(7)] == [0] * 7  # (the built-in prior drafts one here: the test above)
    assert p.choose(3) == 1  # the eighth round without drafts: a probe


def test_a_prior_past_its_rows_extends_the_line_through_its_last_two():
    from glm5next_runtime import _core
    assert _core.RoundCostPrior(verify=[1.0, 1.5]).verify_ratio(4) == pytest.approx(2.5)
    assert _core.RoundCostPrior(verify=[1.0, 1.5, 1.8]).verify_ratio(2) == pytest.approx(1.5)
    assert _core.RoundCostPrior().verify_ratio(3) == pytest.approx(1.5)  # built in: +0.25 per row
    with pytest.raises(ValueError, match="rows = 0: must be >= 1"):
        _core.RoundCostPrior(verify=[1.0, 1.5]).verify_ratio(0)


@pytest.mark.parametrize("fields, culprit", [
    (dict(verify=[2.0, 3.0]), r"verify\[0\] = 2.0+: the unit is a one-row verify"),
    (dict(verify=[1.0, float("nan")]), r"verify\[1\] = nan"),
    (dict(first=-0.1), "first = -0.1"),
    (dict(next=0.0), "next = 0.0"),
    (dict(row=float("inf")), "row = inf"),
])
def test_a_bad_prior_is_refused_naming_the_field(fields, culprit):
    from glm5next_runtime import _core
    with pytest.raises(ValueError, match=culprit):
        _core.RoundCostPrior(**fields)


def test_the_opening_ends_after_at_most_eight_rounds_when_none_is_timed():
    """A round that builds a graph is not timed (verify_ms < 0): the opening does not wait for timings for ever."""
    p = policy(opened=False)
    chosen = []
    for _ in range(9):
        chosen.append(p.choose(3))
        p.observe(chosen[-1], 0, chosen[-1] + 1, 1, 0.2, 0.0, -1.0)
    assert chosen == [0] * 8 + [1]


def test_rejected_drafts_that_cost_time_are_not_drafted():
    p = policy()
    chosen = play(p, lambda j: False, 40)
    assert chosen[-1] == 0 and chosen[10:].count(0) >= 25  # only probes draft
    assert p.acceptance(1) < 0.3  # a few probes' rejections against the prior's 0.5
    assert p.expected_tokens(1) / p.expected_cost(1) < p.expected_tokens(0) / p.expected_cost(0)


def test_accepted_cheap_drafts_are_drafted_up_to_the_limit():
    p = policy(n_max=5)
    chosen = play(p, lambda j: True, 40, limit=5, step=0.02)
    # every round drafts the limit but a pair without drafts (two_plain_rounds_come_back_every_33_...)
    assert all(k == 5 for k in chosen[-10:] if k != 0) and chosen[-10:].count(0) <= 2
    assert p.choose(2) == 2 and p.choose(0) == 0  # the limit (context, max_tokens) still binds


def test_expensive_drafts_are_not_drafted_even_when_accepted():
    p = policy()
    chosen = play(p, lambda j: True, 30, step=3.0)  # a draft step dearer than a whole decode step
    assert chosen[-5:] == [0] * 5


def test_two_plain_rounds_come_back_every_33_while_drafting_pays():
    """What drafting is weighed against is timed again and again (the machine's speed drifts), by the second of two
    rounds without drafts (the first runs on the caches the draft head left)."""
    chosen = play(policy(), lambda j: True, 300, step=0.02)
    plain = [i for i, k in enumerate(chosen) if k == 0 and i > 40]
    runs = plain[::2]
    assert len(runs) >= 6 and [i + 1 for i in runs] == plain[1::2]  # in pairs
    assert all(b - a == 33 for a, b in zip(runs, runs[1:]))


def test_a_round_that_built_a_graph_is_no_sample_of_its_cost():
    p = policy()
    for _ in range(9):
        p.observe(0, 0, 1, 0, 0.0, 0.0, 1.0)
    p.observe(0, 0, 1, 0, 0.0, 0.0, -1.0)  # verify_ms < 0: the costs unknown
    assert p.expected_cost(0) == pytest.approx(1.05)  # + the prior deferred row
    p.observe(1, 1, 2, 1, 0.2, 0.0, -1.0)
    assert p.acceptance(1) > 0.5  # its acceptance counted


def test_a_partly_accepted_position_bounds_the_length():
    """Draft 1 always accepted, draft 2 never: the second draft only costs, so the rounds settle on one."""
    p = policy()
    chosen = play(p, lambda j: j == 1, 60)
    # (two plain rounds in 33; a second draft retried once in ~50 rounds, as its rejections fade with the half-life)
    assert chosen[-20:].count(1) >= 16 and chosen[-20:].count(2) <= 1 and p.acceptance(1) > 0.8


def test_a_longer_draft_timed_while_the_machine_was_slow_is_tried_again():
    """Verify passes of 1, 2, 3 rows cost 1.0, 1.5, 1.6 ms (sublinear, as on a memory-bound model), but the first
    three of 3 rows were timed at 4.0 (a slow spell): two drafts (the second accepted half the time) then look
    worse than one. Tried again every 33 rounds, 3 rows are found cheap and the rounds settle on two drafts."""
    p = policy(n_max=2)
    chosen, slow = [], 3
    for i in range(700):
        k = p.choose(2)
        accepted = min(k, 1 + i % 2)
        ms = {1: 1.0, 2: 1.5, 3: 1.6}[k + 1]
        if k == 2 and slow:
            ms, slow = 4.0, slow - 1
        p.observe(k, accepted, k + 1, 1, 0.18 if k else 0.0, 0.18 * max(k - 1, 0), ms)
        chosen.append(k)
    assert 2 not in chosen[40:100] or chosen[40:100].count(1) > 40  # one draft while 3 rows look slow
    assert chosen[-50:].count(2) >= 40


def test_a_draft_timed_while_the_machine_was_fast_is_priced_at_its_ratio_when_it_slows():
    """One draft accepted a third of the time at 1.7 plain rounds: 1.35 tokens in 1.7 against 1 in 1.05, plain
    decoding wins. Its probes were timed while a plain round took 1.0 ms; then the machine slows 1.3x, where only
    plain rounds run between probes. Priced in ms from before, a draft would look cheap (1.7 ms against 1.37) and the
    policy would draft until its own timings caught up (measured in process, one sequence: one draft in 42 rounds at
    acceptance 0.35); priced as a ratio to the plain rounds of its time, only probes draft."""
    p = policy(n_max=1)
    for i in range(30):  # fast: two plain rounds, then a probe
        p.observe(0, 0, 1, 0, 0.0, 0.0, 1.0)
        p.observe(0, 0, 1, 0, 0.0, 0.0, 1.0)
        p.observe(1, int(i % 3 == 0), 2, 1, 0.2, 0.0, 1.5)
    assert p.acceptance(1) == pytest.approx(1 / 3, abs=0.05)
    drafted = []
    for i in range(200):  # slow
        k = p.choose(1)
        if k:
            drafted.append(i)
        p.observe(k, int(k and len(drafted) % 3 == 0), k + 1, 1, 0.26 * k, 0.0, 1.3 * (1.0 + 0.5 * k))
    assert drafted and all(b - a >= 8 for a, b in zip(drafted, drafted[1:]))
    assert p.expected_cost(1) == pytest.approx(1.3 * 1.7, rel=0.01)


def test_probes_that_find_nothing_quiet_the_policy_until_a_new_text_wakes_it():
    """Drafts never accepted at this module's costs (one draft: 0.18 + 1.35 ms against 1.05): after a few rejected
    probes even an accepted next probe would leave drafting unprofitable, and the policy goes quiet: no more probes
    (nor, in a Generator, draft-head rows) while the text goes on, whatever it becomes. A new text wakes it: the next
    probe comes within 8 rounds and, accepted against the odds (news), brings drafting back; on text like the last,
    its first rejected probe quiets it again."""
    p = policy()
    low = play(p, lambda j: False, 200)
    probes = [i for i, k in enumerate(low) if k]
    assert p.quiet() and 2 <= len(probes) <= 5 and not any(low[probes[-1] + 1:])
    assert play(p, lambda j: True, 100) == [0] * 100  # the text became predictable: quiet all the same
    assert p.wake() and not p.quiet() and not p.wake()
    again = play(p, lambda j: False, 100)
    assert again.index(1) < 8 and sum(again) == 1 and p.quiet()
    p.wake()
    high = play(p, lambda j: True, 300)
    assert high.index(1) < 8
    back = next(i for i, k in enumerate(high) if k == 3)
    assert back <= 100 and high[-20:].count(3) >= 18


def probe_gaps(p, observe, rounds=600):
    """The rounds between the drafting rounds of an n_max 1 policy over `rounds` rounds, each round's outcome told by
    observe(k) (k: the drafts chosen)."""
    drafted = []
    for i in range(rounds):
        k = p.choose(1)
        if k:
            drafted.append(i)
        observe(k)
    return [b - a for a, b in zip(drafted, drafted[1:])]


def test_rejected_probes_space_out_before_their_costs_are_judged():
    """Drafts never accepted at costs where an accepted probe would make drafting pay (one draft: 0.06 + 1.2 ms
    against 1.05, a memory-bound model, pays at acceptance 0.2): every rejected probe doubles the interval from the
    first (8 rounds after the prior's and its first estimate's choices of a draft), not after nine probes every 8
    rounds had judged can_pay; with nothing judged, drafting stays possible, and the policy stays awake."""
    p = policy(n_max=1)
    gaps = probe_gaps(p, lambda k: p.observe(k, 0, k + 1, 1, 0.06 if k else 0.0, 0.0, 1.0 + 0.2 * k))
    assert gaps[:6] == [1, 8, 16, 32, 64, 128] and p.can_pay() and not p.quiet()


def test_where_no_predictable_text_would_pay_a_quiet_policy_wakes_for_one_new_text_in_64():
    """The same rejected probes where even well predicted text cannot pay (one draft: 2.1 ms against 1.0, break-even
    at acceptance 1.1; the bundled model at -t 1, or four sequences batched at -t 2): the first text's first rejected
    probe quiets the policy, and a new text does not wake it (a probe would buy the prompt's draft-head rows for a
    gain no text reaches), but for one in 64, which times the costs again. Where a predictable text would pay (one
    draft: 1.5 ms against 1.0, break-even at 0.45), every new text wakes it."""
    def texts(verify_row_ms, n_texts):
        p = policy(n_max=1)
        probes, awake = [], []
        for _ in range(n_texts):
            p.wake()  # a new request's text
            awake.append(not p.quiet())
            drafted = 0
            for _ in range(20):
                k = p.choose(1)
                drafted += k
                p.observe(k, 0, k + 1, 1, 0.2 if k else 0.0, 0.0, 1.0 + verify_row_ms * k)
            probes.append(drafted)
        return p, probes, awake

    p, probes, awake = texts(0.9, 140)
    assert not p.predictable_text_pays() and p.quiet()
    assert [i for i, n in enumerate(probes) if n] == [0, 64, 128] and probes[64] == probes[128] == 1
    assert [i for i, a in enumerate(awake) if a] == [0, 64, 128]
    p, probes, awake = texts(0.3, 20)
    assert p.predictable_text_pays() and all(n >= 1 for n in probes) and all(awake)


def test_a_predictable_text_pays_where_drafts_accepted_at_0_8_beat_plain_decoding():
    """predictable_text_pays prices a text whose every draft is accepted with probability 0.8 at the costs timed: one
    draft (1.8 tokens) against plain decoding (1 token in 1.05 ms: a verify row and the prior's deferred row), the
    break-even round 1.89 ms."""
    for verify_row_ms, pays in ((0.6, True), (0.75, False)):  # one draft's round: 0.2 + 1.0 + verify_row_ms
        p = policy(n_max=1)
        for _ in range(12):
            p.observe(1, 0, 2, 1, 0.2, 0.0, 1.0 + verify_row_ms)
            p.observe(0, 0, 1, 1, 0.0, 0.0, 1.0)
            p.observe(0, 0, 1, 1, 0.0, 0.0, 1.0)
        assert p.expected_cost(1) == pytest.approx(1.2 + verify_row_ms, rel=0.01)
        assert p.predictable_text_pays() == pays


def test_rounds_that_draft_nothing_count_as_rejected_and_quiet_the_policy():
    """A round whose draft step stopped before drafting (p_min) counts as a rejected draft (it taught nothing, and
    one draft was chosen every round while the prior stood): a few such probes and the policy goes quiet."""
    p = policy(n_max=1)
    # step 0 ran, p_min stopped the draft
    gaps = probe_gaps(p, lambda k: p.observe(0, 0, 1, 1, 0.2 if k else 0.0, 0.0, 1.0, n_chosen=k))
    assert p.quiet() and 1 <= len(gaps) <= 4 and min(gaps) >= 8


def test_n_min_keeps_positive_choices_at_least_n_min():
    p = policy(n_max=4, n_min=2)
    chosen = play(p, lambda j: j <= 2, 30, limit=4)
    assert all(k == 0 or k >= 2 for k in chosen) and p.choose(1) == 0


def test_n_max_below_zero_is_refused():
    with pytest.raises(ValueError, match="n_max = -1"):
        policy(n_max=-1)


def timed(p, rounds, verify_1, verify_2, first):
    """`rounds` times two rounds without drafts then one of one accepted draft, with these costs (ms). (A plain round
    right after one that drafted is no sample of plain decoding: the second of the two is.)"""
    for _ in range(rounds):
        p.observe(0, 0, 1, 0, 0.0, 0.0, verify_1)
        p.observe(0, 0, 1, 0, 0.0, 0.0, verify_1)
        p.observe(1, 1, 2, 1, first, 0.0, verify_2)


def test_drafting_that_could_not_pay_even_if_always_accepted_is_given_up():
    """The bundled model at -t 1: a second verify row costs ~0.85 of the first, so no k pays even fully accepted
    (k = 1: 2 tokens in 2.1 ms against 1 in 1.0). Judged once step 0 and both verify sizes were timed 9 times; until
    reconsider, later timings that would pay do not bring drafting back (no round that follows drafts measures them)."""
    p = policy()
    assert p.can_pay()  # nothing measured: the prior
    timed(p, 8, 1.0, 1.9, 0.2)
    assert p.can_pay()
    timed(p, 1, 1.0, 1.9, 0.2)
    assert not p.can_pay()
    # 3 rows, never verified: the line through 1 row (1.0 ms) and 2 rows (1.9 ms); a later step: the prior 0.25
    assert p.expected_cost(2) == pytest.approx(0.2 + 0.25 + 2.8)
    timed(p, 9, 1.0, 1.1, 0.1)
    assert not p.can_pay()


def test_drafting_that_pays_when_accepted_is_kept_even_while_rejected():
    p = policy()
    timed(p, 9, 1.0, 1.2, 0.2)
    for _ in range(20):
        p.observe(1, 0, 2, 1, 0.2, 0.0, 1.2)  # rejected: not worth drafting now, but it could pay
    assert p.choose(3) == 0 and p.can_pay()


def test_a_cost_is_the_mean_of_its_last_nine_timings_clipped_at_twice_their_median():
    """One preempted round (10x) weighs as 2x, not 10x; the heavier tail of rounds with drafts still counts."""
    p = policy()
    for ms in [1.0] * 8 + [10.0]:
        p.observe(0, 0, 1, 0, 0.0, 0.0, ms)
    assert p.expected_cost(0) == pytest.approx((8 * 1.0 + 2.0) / 9 + 0.05 * (10 / 9))  # + the prior deferred row
    for ms in [1.0, 1.2] * 5:  # the window slides: the 10 ms has left it
        p.observe(0, 0, 1, 0, 0.0, 0.0, ms)
    assert p.expected_cost(0) == pytest.approx((5 * 1.2 + 4 * 1.0) / 9 * 1.05)


def drafting_rounds(p, rounds, verify_row_ms):
    """The rounds of `rounds` in which an n_max 1 policy drafts, every other draft accepted, a verify pass costing
    1 ms + verify_row_ms per draft and step 0 0.2 ms."""
    drafted = []
    for i in range(rounds):
        k = p.choose(1)
        accepted = k if len(drafted) % 2 == 0 else 0
        if k:
            drafted.append(i)
        p.observe(k, accepted, k + 1, 1, 0.2 if k else 0.0, 0.0, 1.0 + verify_row_ms * k)
    return drafted


def test_a_round_without_drafts_is_timed_before_drafting_is_weighed_against_it():
    """The prior prices a second verify row at a quarter of a decode step; at 0.5 and acceptance 0.5 one draft
    does not pay (1.5 tokens in 1.7 ms against 1 in 1.05), which only a timed plain round shows."""
    drafted = drafting_rounds(policy(n_max=1), 100, 0.5)
    probes = [i for i in drafted if i >= 8]  # the prior's choices first, then probes only, once plain was timed
    assert drafted[0] == 0 and probes and all(b - a >= 8 for a, b in zip(probes, probes[1:]))


def test_probes_half_accepted_where_drafting_does_not_pay_quiet_each_text_after_a_few():
    """Where one draft accepted half the time does not pay (1.5 tokens in 1.7 ms against 1 in 1.05; held-out code on
    the bundled model: two probes in three accepted, drafting not paying), a rejected probe that an accepted next one
    would not redeem quiets the policy: each text pays a few probes and the draft-head rows of its first rounds, not
    a probe every 128 rounds and every row for as long as it runs. Drafting stays possible (can_pay)."""
    p = policy(n_max=1)
    texts = []
    for _ in range(5):
        p.wake()  # a new request's text
        texts.append(drafting_rounds(p, 200, 0.5))
    assert all(t and max(t) < 40 for t in texts) and all(len(t) <= 3 for t in texts[1:]) and p.quiet()
    assert p.can_pay()  # fully accepted, one draft would pay (2 tokens in 1.7 ms)


@pytest.fixture(params=["tiny", "predictable"])
def model(request, checkpoints):
    """f32 files: "tiny" (random weights: drafts rejected, so the rounds go to 0 drafts and probes) and
    "predictable" (drafts accepted at every position). A Model per test: its adaptive generators share one policy,
    which would carry what one test learned into the next."""
    from glm5next_runtime import Model
    ckpt = checkpoints.make(f"spec-{request.param}", request.param, dtype="f32")
    return Model(checkpoints.convert(ckpt, outtype="f32"), n_ctx=512, n_threads=2, draft_n_max=3)


def slots(checkpoints, preset: str, n: int = 1, warmup: bool = True):
    """n Models on one engine (a server's slots: Model.another_sequence) of the f32 file of `preset`, ubatches of 32
    rows (so that a chat's history is longer than one), up to 3 drafts; each with its own policies. warmup=False: no
    draft calibration at load, the policies start from the built-in cost ratios (not from this machine's timings)."""
    from glm5next_runtime import Model
    ckpt = checkpoints.make(f"spec-{preset}", preset, dtype="f32")
    first = Model(checkpoints.convert(ckpt, outtype="f32"), n_ctx=512, n_threads=2, n_batch=32, draft_n_max=3,
                  n_seq_max=n, warmup=warmup)
    return [first] + [first.another_sequence() for _ in range(n - 1)]


def generate(model, prompt, n, cache_prompt=False, **kw):
    g = model.generator(temperature=0, seed=0, **kw)
    out = [g.start(prompt, cache_prompt=cache_prompt)]
    while len(out) < n:
        out += g.step(max_tokens=n - len(out))
    g.finish()
    return out, g.stats


@pytest.mark.parametrize("seed", [7, 9])
def test_greedy_output_with_adaptive_lengths_equals_plain_decoding(model, seed):
    prompt = random_tokens(80, seed=seed)
    plain, _ = generate(model, prompt, 120, n_max=0)
    adaptive, stats = generate(model, prompt, 120, adaptive=True)
    assert adaptive == plain
    assert sum(stats["rounds_at_length"]) >= stats["n_drafts"] > 0
    assert sum(k * n for k, n in enumerate(stats["rounds_at_length"])) >= stats["n_drafted"]


def test_a_models_adaptive_generators_share_what_they_learned(model, request):
    """The policy outlives a request (Model keeps one per n_max and n_min): the next generation starts from the
    acceptance the last one measured, not from the prior. Fixed lengths and other n_max have none or their own."""
    first = model.generator(temperature=0)
    assert first.policy is not None and first.policy.acceptance(1) == pytest.approx(0.5)  # the prior
    generate(model, random_tokens(80, seed=4), 100, adaptive=True)
    second = model.generator(temperature=0)
    assert second.policy is first.policy
    if request.node.callspec.params["model"] == "tiny":
        assert second.policy.acceptance(1) < 0.5  # rejected drafts
    else:
        assert second.policy.acceptance(1) > 0.5  # accepted drafts (the probes: drafting does not pay at f32)
    assert model.generator(n_max=2).policy.n_max == 2
    assert model.generator(adaptive=False).policy is None
    assert model.generator(n_max=0).policy is None


def test_each_sequence_learns_on_its_own(model):
    """Model.another_sequence (a server's slot) has its own policies: slots generate at once, on threads of their
    own, and a policy is told every round's timings."""
    other = model.another_sequence()
    generate(model, random_tokens(80, seed=4), 100, adaptive=True)
    assert model.generator(temperature=0).policy.acceptance(1) != pytest.approx(0.5)
    assert other.generator(temperature=0).policy is not model.generator(temperature=0).policy
    assert other.generator(temperature=0).policy.acceptance(1) == pytest.approx(0.5)  # the prior


def test_a_policy_of_another_length_is_refused(model):
    from glm5next_runtime import _core
    with pytest.raises(ValueError, match="n_max 2"):
        _core.Generator(model.sequence, n_max=3, policy=_core.DraftLengthPolicy(2))


def test_a_generator_whose_policy_cannot_pay_decodes_as_without_speculation(model):
    """No drafts, no probes and no draft-head rows (draft_ms 0), the tokens of plain decoding; a later request
    that drafts resumes where the draft head's rows end and drafts as a fresh sequence does."""
    prompt = random_tokens(80, seed=6)
    plain, _ = generate(model, prompt, 60, n_max=0)
    generate(model, prompt[:50], 5, adaptive=False)  # draft-head rows for the first 50 positions and more
    timed(model.generator(temperature=0).policy, 9, 1.0, 1.9, 0.2)  # the model's policy for n_max 3
    g = model.generator(temperature=0)
    dormant = [g.start(prompt, cache_prompt=True)]  # resumes at 50 (the rows after it are the other request's)
    while len(dormant) < 60:
        dormant += g.step(max_tokens=60 - len(dormant))
    g.finish()
    stats = g.stats
    assert stats["n_cached_tokens"] == 50 and dormant == plain
    assert stats["n_drafted"] == 0 and stats["draft_ms"] == 0.0 and stats["rounds_at_length"][1:] == [0, 0, 0]
    whole = prompt + dormant

    def drafts(cache_prompt):
        g = model.generator(n_max=3, adaptive=False, temperature=0, seed=0)
        g.start(whole, cache_prompt=cache_prompt)
        out = []
        for _ in range(4):
            out.append(list(g.draft()))
            g.verify(len(out[-1]))
        return out, g.stats["n_cached_tokens"]

    (resumed, n_cached), (fresh, _) = drafts(True), drafts(False)
    assert resumed == fresh
    assert 0 < n_cached <= 50  # the dormant request wrote no draft-head rows to resume from


def test_rows_deferred_by_rounds_without_drafts_are_written(model):
    """After an adaptive generation (rounds without drafts defer the draft head's rows), the sequence resumes at
    its end and drafts exactly as a fresh sequence that wrote every row. (60 tokens: too few rounds for the policy
    to judge that drafting cannot pay on these small files, nine paired probes at least eight rounds apart, after
    which it would write no rows at all.) Rejected probes may have quieted the policy (timings decide), which then
    writes no more rows: a drafting request then resumes where they end, and drafts as a fresh sequence all the same."""
    prompt = random_tokens(80, seed=5)
    tokens, stats = generate(model, prompt, 60, adaptive=True)
    p = model.generator(temperature=0).policy
    assert p.can_pay() and stats["rounds_at_length"][0] > 0
    quiet = p.quiet()
    whole = prompt + tokens  # the last token is not evaluated yet: the sequence resumes one before the end

    def drafts(cache_prompt):
        g = model.generator(n_max=3, adaptive=False, temperature=0, seed=0)
        g.start(whole, cache_prompt=cache_prompt)
        n_cached = g.stats["n_cached_tokens"]
        if not cache_prompt:
            assert n_cached == 0
        elif quiet:
            assert len(prompt) <= n_cached < len(whole) - 1  # the prompt's rows, not those after the policy quieted
        else:
            assert n_cached == len(whole) - 1
        out = []
        for _ in range(6):
            out.append(list(g.draft()))
            g.verify(len(out[-1]))
        return out

    resumed = drafts(True)
    assert resumed == drafts(False)


def test_a_generation_on_text_its_draft_head_misses_goes_quiet_and_the_next_turn_keeps_the_cache(checkpoints):
    """The random file, its policy having seen drafts rejected 40 times: the generation's first rejected probe quiets
    it (no draft-head rows from then on) and it decodes plain decoding's tokens. The chat's next turn resumes the
    whole cached history without drafting (drafting would have to evaluate the rows after the quiet again); a new
    text, which loses nothing of the cache, wakes the policy and probes again."""
    model, = slots(checkpoints, "tiny")
    prompt = random_tokens(80, seed=16)
    plain, _ = generate(model, prompt, 60, n_max=0)
    model.reset()
    p = model.generator(temperature=0).policy
    assert play(p, lambda j: False, 3) == [0, 0, 0]  # its opening, timed at this module's costs
    for _ in range(40):  # one draft, rejected
        p.observe(1, 0, 2, 1, STEP, 0.0, verify_ms(2))
    reply, first = generate(model, prompt, 60, cache_prompt=True)
    assert reply == plain and p.quiet() and 1 <= first["n_drafted"] <= 2
    turn = prompt + reply + random_tokens(10, seed=17)
    _, second = generate(model, turn, 20, cache_prompt=True)
    assert second["n_cached_tokens"] == len(prompt + reply) - 1 and second["n_drafted"] == 0 and p.quiet()
    _, fresh = generate(model, random_tokens(40, seed=18), 30, cache_prompt=True)
    assert fresh["n_drafted"] >= 1


def batched_round(batch, gens, out, total, batch_policy):
    """One round of `gens` batched (_core.Batch) under batch_policy, each toward `total` tokens, without grammars;
    each one's emitted tokens appended to its list in `out`."""
    batch.set(gens, [total - len(o) for o in out], batch_policy)
    batch.begin()
    while batch.drafting:
        batch.draft_step([])
    batch.verify([])
    for i in range(len(gens)):
        out[i] += batch.emitted(i)


def test_generations_batched_under_a_quiet_policy_rest_and_their_next_turn_keeps_the_cache(checkpoints):
    """A batch's policy that went quiet puts the batch's generations to rest (Batch.begin): no drafts and no
    draft-head rows, plain decoding's tokens. A chat's next turn on such a sequence resumes its whole cached history
    without drafting, though its own policy could draft: it would have to evaluate that history again (before, it
    did: a server's every turn after a batch that stopped drafting)."""
    from glm5next_runtime import _core
    models = slots(checkpoints, "tiny", 2)
    prompts = [random_tokens(50, seed=19), random_tokens(50, seed=20)]
    plain = [generate(m, pr, 30, n_max=0)[0] for m, pr in zip(models, prompts)]
    batch_policy = policy()
    play(batch_policy, lambda j: False, 200)
    assert batch_policy.quiet()
    gens = [m.generator(temperature=0) for m in models]
    for g, pr in zip(gens, prompts):
        _core.Batch.start(g, pr, False)
    batch, out = _core.Batch(models[0].engine), [[], []]
    while min(map(len, out)) < 30:
        batched_round(batch, gens, out, 30, batch_policy)
    for g in gens:
        g.finish()
        assert g.stats["n_drafted"] == 0 and g.stats["draft_ms"] == 0.0 and not g.drafting
    assert out == plain and batch_policy.quiet()
    history = prompts[0] + out[0]
    _, turn = generate(models[0], history + random_tokens(10, seed=21), 10, cache_prompt=True)
    assert turn["n_cached_tokens"] == len(history) - 1 and turn["n_drafted"] == 0
    assert models[0].generator(temperature=0).policy.can_pay()  # its own policy would have drafted


def test_a_batch_that_goes_quiet_before_it_drafts_never_writes_its_prompts_draft_rows(checkpoints):
    """A new batch policy opens with rounds without drafts: the prompts' draft-head rows wait for a round that drafts
    (the NextN layer over each prompt once more). The policy then goes quiet (its probes rejected), its generations
    rest, and those rows are never written: no draft-head time at all, plain decoding's tokens. (They were written at
    the first round: on the bundled model, 4 clients, 5-17 ms of each ~1 s run for nothing.)"""
    from glm5next_runtime import _core
    models = slots(checkpoints, "tiny", 2)
    prompts = [random_tokens(50, seed=23), random_tokens(50, seed=24)]
    plain = [generate(m, pr, 20, n_max=0)[0] for m, pr in zip(models, prompts)]
    batch_policy = policy(opened=False)
    gens = [m.generator(temperature=0) for m in models]
    for g, pr in zip(gens, prompts):
        _core.Batch.start(g, pr, False)
    batch, out, steps = _core.Batch(models[0].engine), [[], []], 0
    while min(map(len, out)) < 20:
        batched_round(batch, gens, out, 20, batch_policy)
        steps += 1
        if steps == 3:  # the prompts' step, then two opening rounds: now the policy's probes find nothing
            assert not batch_policy.quiet() and all(g.stats["draft_ms"] == 0.0 for g in gens)
            play(batch_policy, lambda j: False, 200)
            assert batch_policy.quiet()
    for g in gens:
        g.finish()
        assert g.stats["n_drafted"] == 0 and g.stats["draft_ms"] == 0.0
    assert out == plain


def test_a_new_request_on_the_scheduler_wakes_its_quiet_batch_policies(checkpoints):
    """The scheduler's batch policies outlive requests: one that went quiet on a batch's text probes the text of the
    next requests (Scheduler admits them), or batched generations would never draft again."""
    from types import SimpleNamespace
    from glm5next_runtime.scheduler import Scheduler
    # the built-in cost ratios, so that the played rounds judge the same way on every machine: with a prior calibrated
    # at load (this machine's timings) the policy was once left not quiet after them in a full run (stop 45)
    models = slots(checkpoints, "tiny", 2, warmup=False)
    scheduler = Scheduler(64)
    jobs = [m.generation(random_tokens(20, seed=22 + i), max_tokens=40, temperature=0, cache_prompt=False)
            for i, m in enumerate(models)]
    batch_policy = scheduler.batch_policy([SimpleNamespace(job=j) for j in jobs])  # two decoding sequences'
    play(batch_policy, lambda j: False, 200)
    assert batch_policy.quiet()
    scheduler.start()
    try:
        results = [h.stream.finish() for h in [scheduler.submit(j) for j in jobs]]
    finally:
        scheduler.close()
    assert all(r.metrics["n_drafted"] >= 1 for r in results)  # the probe 8 rounds into the new text


def sample(model, prompt, n, **kw):
    g = model.generator(temperature=0.8, **kw)
    out = [g.start(prompt)]
    while len(out) < n:
        out += g.step(max_tokens=n - len(out))
    return out, g.stats


def test_seeded_sampling_under_rejection_drafts_n_max_every_round_and_reproduces(model):
    """Under spec_sampling "rejection" (the default), sampled output depends on the draft lengths: with a seed it must
    not depend on timing, so every round drafts n_max (but the last rounds, which the token limit cuts short: one at
    most per shorter length), and the same seed gives the same tokens."""
    rejection = model
    assert model.spec["sampled_accept"] == "rejection"
    prompt = random_tokens(40, seed=11)
    first, stats = sample(rejection, prompt, 60, seed=3)
    rounds = stats["rounds_at_length"]
    assert all(n <= 1 for n in rounds[:3]) and rounds[3] > 0
    assert sample(rejection, prompt, 60, seed=3)[0] == first


def test_seeded_sampling_under_match_adapts_and_emits_plain_decodings_tokens(model):
    """Under spec_sampling "match" a seeded sample is plain decoding's whatever the draft lengths, so the lengths stay
    adaptive (a policy decides them) and the tokens equal those of the same seed without drafts."""
    from glm5next_runtime import Model
    model = Model(model.path, n_ctx=512, n_threads=2, draft_n_max=3, spec_sampling="match")
    prompt = random_tokens(40, seed=11)
    assert model.generator(temperature=0.8, seed=3).policy is not None
    tokens, stats = sample(model, prompt, 60, seed=3)
    assert stats["n_drafted"] > 0  # drafts were verified, not only planned
    assert tokens == sample(model, prompt, 60, seed=3, n_max=0)[0]


def test_unseeded_sampling_adapts(model, request):
    """Without a seed nothing is to be reproduced: the lengths adapt, as they do with a seed when asked. On "tiny"
    drafts are rejected, so rounds go to no drafts. (Whether accepted drafts pay on these f32 files depends on this
    machine's timings: a draft step costs about a verify pass there, so no claim on "predictable".)"""
    prompt = random_tokens(40, seed=12)
    for kw in ({}, {"seed": 3, "adaptive": True}):
        assert model.generator(temperature=0.8, **kw).policy is not None
        rounds = sample(model, prompt, 80, **kw)[1]["rounds_at_length"]
        if request.node.callspec.params["model"] == "tiny":
            assert rounds[0] > 1


def test_drafting_given_up_is_judged_anew_after_many_dormant_rounds():
    """A server slot's policy lives as long as the server: one that judged while the machine was busy must not keep
    drafting off for good. After RECONSIDER_AFTER rounds without drafts (observe_dormant), a request's start
    (reconsider) clears the judgment; fresh paired probes then judge again, and the same costs give up again."""
    p = policy()
    timed(p, 9, 1.0, 1.9, 0.2)
    assert not p.can_pay()
    for _ in range(p.RECONSIDER_AFTER - 1):
        p.observe_dormant()
    assert not p.reconsider() and not p.can_pay()
    p.observe_dormant()
    assert p.reconsider() and p.can_pay()
    assert not p.reconsider()  # judged anew once: nothing to clear
    timed(p, 8, 1.0, 1.9, 0.2)
    assert p.can_pay()  # nine fresh pairs are needed, not the old ones
    timed(p, 1, 1.0, 1.9, 0.2)
    assert not p.can_pay()


def test_a_request_after_reconsidering_drafts_again_with_plain_decodings_tokens(model):
    """Generator.start reconsiders: the dormant rounds wrote no draft-head rows, and the request resumes its prompt
    where the draft head's rows end, so drafting again gives plain decoding's tokens."""
    prompt = random_tokens(80, seed=8)
    plain, _ = generate(model, prompt, 60, n_max=0)
    p = model.generator(temperature=0).policy
    timed(p, 9, 1.0, 1.9, 0.2)
    _, dormant = generate(model, prompt[:40], 20, cache_prompt=True)
    assert dormant["n_drafted"] == 0 and not p.can_pay()
    for _ in range(p.RECONSIDER_AFTER):
        p.observe_dormant()
    out, stats = generate(model, prompt, 60, cache_prompt=True)
    assert p.can_pay() and stats["n_drafted"] > 0 and out == plain


def test_reconsidering_waits_for_a_request_that_loses_little_of_the_cached_prompt(checkpoints):
    """Drafting resumes a prompt only where the draft head's rows end, and a dormant sequence wrote none: a chat's
    next turn, whose history is cached, keeps that cache and stays without drafts; a request that loses at most one
    ubatch (n_batch) of it, here a new conversation, judges anew."""
    model, = slots(checkpoints, "predictable")
    p = model.generator(temperature=0).policy
    timed(p, 9, 1.0, 1.9, 0.2)
    history = random_tokens(100, seed=13)
    reply, _ = generate(model, history, 20, cache_prompt=True)
    for _ in range(p.RECONSIDER_AFTER):
        p.observe_dormant()
    _, turn = generate(model, history + reply + random_tokens(10, seed=14), 20, cache_prompt=True)
    assert not p.can_pay() and turn["n_cached_tokens"] >= 100 and turn["n_drafted"] == 0
    _, fresh = generate(model, random_tokens(40, seed=15), 40, cache_prompt=True)
    assert p.can_pay() and fresh["n_drafted"] > 0
