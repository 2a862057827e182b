"""Draft-MTP round costs measured at load (glm5next_runtime/draft_calibration.py; issue 28): a model that drafts with
adaptive lengths times rounds of 0..n_max drafts on a scratch sequence while it loads, and every draft length policy
it makes (its own, a server slot's, a batch's, a benchmark's) assumes those costs until it timed its own."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import random_tokens


@pytest.fixture(scope="module")
def model(predictable_gguf):
    from glm5next_runtime import Model
    return Model(predictable_gguf, n_ctx=256, n_threads=2, draft_n_max=3)


def test_a_model_that_drafts_adaptively_times_its_rounds_at_load(model):
    c = model.draft_calibration
    assert len(c.prior.verify) == 4 and c.prior.verify[0] == 1.0  # verify passes of 1..n_max+1 rows
    assert all(v > 0 for v in c.prior.verify) and c.prior.first > 0 and c.prior.next > 0
    assert 1 <= c.rounds <= 9 and c.timed_ms > 0 and c.warmup_ms > 0
    assert "verify rows 1.. 1.00, " in c.summary() and "later steps" in c.summary() and c.measured_next


def test_its_policies_assume_the_calibrated_costs(model):
    verify = model.draft_calibration.prior.verify
    assert model.generator(temperature=0).policy.prior.verify == verify  # a request's (shared) policy
    assert model.another_sequence().generator(temperature=0).policy.prior.verify == verify  # a server slot's
    synthetic = model.generator(temperature=0, synthetic_accepted=1.5).policy  # a benchmark's: apart from the real
    assert synthetic.prior.verify == verify and synthetic is not model.generator(temperature=0).policy
    # shared by the generators of one synthetic acceptance (a benchmark row's repetitions), not of another
    assert model.generator(temperature=0, synthetic_accepted=1.5).policy is synthetic
    assert model.generator(temperature=0, synthetic_accepted=2.5).policy is not synthetic
    assert model.new_draft_length_policy(2, 1).prior.verify == verify


def test_a_batchs_policy_assumes_the_costs_of_its_generations_policy(model):
    from types import SimpleNamespace
    from glm5next_runtime.scheduler import Scheduler
    generator = model.generator(temperature=0)
    made = Scheduler(512).batch_policy([SimpleNamespace(job=SimpleNamespace(generator=generator))])
    assert made.prior.verify == model.draft_calibration.prior.verify and made is not generator.policy


def test_a_batch_of_another_size_prices_its_rounds_with_a_policy_of_its_own(model):
    """A round's costs grow with its sequences: 2- and 3-sequence rounds keep apart timings (Scheduler.batch_policy),
    while batches of one size share theirs over the scheduler's life."""
    from types import SimpleNamespace
    from glm5next_runtime.scheduler import Scheduler
    scheduler = Scheduler(512)

    def batch(n):
        return [SimpleNamespace(job=SimpleNamespace(generator=model.generator(temperature=0))) for _ in range(n)]

    two, three = scheduler.batch_policy(batch(2)), scheduler.batch_policy(batch(3))
    assert two is not three
    assert scheduler.batch_policy(batch(2)) is two and scheduler.batch_policy(batch(3)) is three


def test_a_zero_budget_times_one_round_of_each_kind(model):
    from glm5next_runtime.draft_calibration import calibrate
    c = calibrate(model.engine, 2, 0.0, {"cache_type": "f16"})
    assert c.rounds == 1 and len(c.prior.verify) == 3


def test_calibration_needs_a_draft(model):
    from glm5next_runtime.draft_calibration import calibrate
    with pytest.raises(ValueError, match="n_max = 0: must be >= 1"):
        calibrate(model.engine, 0, 0.2, {})


@pytest.mark.parametrize("kwargs", [dict(warmup=False), dict(draft_adaptive=False), dict(spec_type="none"),
                                    dict(draft_n_max=0)])
def test_no_calibration_without_adaptive_drafting(predictable_gguf, kwargs):
    from glm5next_runtime import Model
    assert Model(predictable_gguf, n_ctx=256, n_threads=2, **kwargs).draft_calibration is None


def test_a_calibration_that_fails_warns_and_the_model_loads(predictable_gguf):
    """What fails on the scratch rounds fails a request too, where it is named: n_max 3 does not fit ubatches of 2
    rows. The load goes on with the built-in ratios."""
    from glm5next_runtime import Model
    with pytest.warns(RuntimeWarning, match="round costs not measured at load .*n_batch"):
        m = Model(predictable_gguf, n_ctx=256, n_threads=2, n_batch=2, draft_n_max=3)
    assert m.draft_calibration is None and m.new_draft_length_policy(3).prior.verify == []
    with pytest.raises(ValueError, match="n_batch"):
        m.generator(temperature=0)


def test_the_policys_estimate_is_the_mean_clipped_at_twice_the_median():
    from glm5next_runtime import _core
    clipped_mean = _core.DraftLengthPolicy.clipped_mean  # the calibration's estimator too
    assert clipped_mean([1.0, 1.0, 10.0]) == pytest.approx(4.0 / 3.0)  # 10 counts as 2
    assert clipped_mean([2.0]) == 2.0


def test_the_verify_ratios_never_fall_as_rows_are_added(model):
    from glm5next_runtime.draft_calibration import calibrate
    verify = calibrate(model.engine, 3, 0.05, {"cache_type": "f16"}).prior.verify
    assert verify[0] == 1.0 and all(b >= a for a, b in zip(verify, verify[1:]))


@pytest.mark.parametrize("flags, warmup", [([], True), (["--no-warmup"], False), (["--warmup"], True)])
def test_the_warmup_flags_of_llama_server_turn_it_on_and_off(flags, warmup):
    import argparse
    from glm5next_runtime.model_args import add_model_args, model_kwargs
    p = argparse.ArgumentParser()
    add_model_args(p)
    assert model_kwargs(p.parse_args(["-m", "x.gguf", *flags]))["warmup"] is warmup


def test_the_load_leaves_no_openmp_team_behind_for_a_generation_thread(predictable_gguf):
    """The rounds timed at load run on a thread that has ended when the model is returned: a generation on another
    thread (a server's scheduler, a web framework's worker) is then the only live thread with an OpenMP team, and
    the engine does not warn of two (graph_threads.h: two live teams on two cores made the server's draft-MTP 3x
    slower). The warning does come once the main thread has generated and another thread generates: a fresh
    process, for it comes once per process."""
    script = textwrap.dedent(f"""
        import sys, threading
        from glm5next_runtime import Model
        from glm5next_runtime.draft_calibration import wait_until_gone
        m = Model({str(predictable_gguf)!r}, n_ctx=256, n_threads=2)
        assert m.draft_calibration is not None
        def on_a_thread():
            t = threading.Thread(target=lambda: m.generate([1, 2, 3], max_tokens=8, temperature=0))
            t.start()
            t.join()
            wait_until_gone(t)  # its team gone before the main thread runs a graph
        on_a_thread()
        m.generate([1, 2, 3], max_tokens=8, temperature=0)  # the main thread's team, alive from now on
        print("main thread generated", file=sys.stderr, flush=True)
        on_a_thread()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    before, marker, after = out.stderr.partition("main thread generated")
    assert marker and "ggml graphs now run on" not in before
    assert "ggml graphs now run on 2 live threads" in after


def test_each_kind_is_timed_after_rounds_of_its_own_kind(model, monkeypatch):
    """A round runs slower after rounds of another kind (their weights took the CPU's caches): each turn times its
    rounds only after WARM_ROUNDS rounds of its own kind since its start, so that every kind is priced as it runs in
    a generation (draft_calibration.WARM_ROUNDS: by how much)."""
    from glm5next_runtime import _core, draft_calibration

    events = []  # (generator index, "start" | "step" | "stats")

    class Recorded:
        def __init__(self, *args, **kwargs):
            self.inner, self.i = _core.Generator(*args, **kwargs), len(Recorded.made)
            Recorded.made.append(self)

        def start(self, *args, **kwargs):
            events.append((self.i, "start"))
            return self.inner.start(*args, **kwargs)

        def step(self, *args):
            events.append((self.i, "step"))
            return self.inner.step(*args)

        @property
        def stats(self):
            events.append((self.i, "stats"))
            return self.inner.stats

    Recorded.made = []
    monkeypatch.setattr(draft_calibration, "_core", type("Core", (), {"Generator": Recorded, "Seq": _core.Seq,
                                                                     "DraftLengthPolicy": _core.DraftLengthPolicy,
                                                                     "RoundCostPrior": _core.RoundCostPrior}))
    draft_calibration.calibrate(model.engine, 2, 0.05, {"cache_type": "f16"})
    timed, since_start, last = 0, 0, None
    for i, what in events:
        if what == "start":
            last, since_start = i, 0
            continue
        assert i == last, "a kind's rounds ran in another kind's turn"
        if what == "step":
            since_start += 1
        elif since_start < draft_calibration.WARM_ROUNDS + 1:  # the stats read before a timed round's step
            assert since_start == draft_calibration.WARM_ROUNDS, f"a round timed after {since_start} of its kind"
            timed += 1
    assert timed >= 3  # one turn of each kind at least, each timed
