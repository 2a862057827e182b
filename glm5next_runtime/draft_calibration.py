"""Draft-MTP round costs measured at load (issue 28; docs/runtime.md, Draft length), so that the first
round of a process's first request chooses its drafts as a warmed-up draft length policy would.

A new DraftLengthPolicy prices the rounds it has not timed from a RoundCostPrior, in units of a round without
drafts. The built-in one says a verify row costs +0.25 of it; on this project's CPUs it costs 0.4-0.9 (bundled model
q8_0 at -t 2: verify passes of 1..4 rows 1, 1.42, 1.70, 2.03; the bench preset 1, 1.84, 2.4, 2.8). Until the policy
had timed verify passes of two row counts, a prior that low made drafting look up to 50% better than it was. Here
each round kind is timed on a scratch sequence of the model's engine instead: rounds of 0..n_max drafts (synthetic
acceptance, so each carries its full drafts), in turn, so that the machine's swings reach all kinds alike, each
kind's cost estimated as the policy estimates its own (DraftLengthPolicy.clipped_mean).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from . import _core

# The scratch prompt: two tokens (ids valid in every vocabulary); its rows only give the rounds a context.
SCRATCH_PROMPT = [0, 1]
# Rounds of a kind in a row after each start that are not timed: a round runs slower after rounds of another kind
# (their weights and caches took the CPU's caches), and a kind timed right after another was priced as it never runs
# in a generation, where rounds of one kind follow each other. Bundled model q8_0 at -t 1, 384 rows of context: plain
# rounds after a one-draft round took 1.23x, 1.08x, 1.04x, then 1.0x the time of a plain stream's; with kinds timed
# right after each other, the first round of each, a verify pass of 2 rows was priced at 1.3-1.45 plain rounds where
# it costs 1.6-1.8 in a stream of one-draft rounds (median of 250 rounds each), and the first requests of a fresh
# process drafted where drafting loses 13% (fixed one draft at acceptance 0.62: 0.87x plain decoding).
WARM_ROUNDS = 2
# Rounds of a kind timed per turn, after its WARM_ROUNDS (the start's two-row prompt is not timed, and later turns
# share it among more rounds): one in the first, so that a model whose rounds take tens of ms (the bench preset at
# -t 1: ~40 ms for 4 rows) exceeds the 200 ms budget by as little as the warm rounds allow (one turn of each kind:
# ~450 ms there); at most 9 in all, the policy's window of recent timings (kWindow).
TURN_ROUNDS = (1, 2, 3, 3)
# The smallest ratio reported for a draft step (two estimates' difference can be ~0 or negative in noise).
MIN_RATIO = 0.01


@dataclass(frozen=True)
class DraftCalibration:
    """prior: the costs (_core.RoundCostPrior, units of a round without drafts); measured_next: whether the later
    draft steps were timed (n_max > 1; else prior.next is the built-in ratio); warmup_ms: the first round of each kind
    (the weights first touched: what llama-server's warmup run pays at load); timed_ms: the turns after it, their
    untimed rounds included; rounds: the fewest timed rounds of a kind (the first kinds may have
    had a turn more)."""
    prior: _core.RoundCostPrior
    measured_next: bool
    warmup_ms: float
    timed_ms: float
    rounds: int

    def summary(self) -> str:
        """One line for a load report: the verify ratios and the time taken."""
        verify = ", ".join(f"{v:.2f}" for v in self.prior.verify)
        later = f", later steps {self.prior.next:.2f}" if self.measured_next else ""
        rounds = f"{self.rounds} round{'' if self.rounds == 1 else 's'} of each kind at least"
        return (f"draft-MTP round costs (x a round without drafts): verify rows 1.. {verify}; draft step "
                f"{self.prior.first:.2f}{later}; timed in {self.timed_ms:.0f} ms ({rounds}) after a "
                f"{self.warmup_ms:.0f} ms warmup")


def calibrate(engine: _core.Engine, n_max: int, budget_s: float, sequence_args: dict) -> DraftCalibration:
    """time_rounds on a thread of its own, which has ended when this returns: ggml's CPU backend keeps an OpenMP team
    for every thread that ran a graph until that thread ends, and two live teams make every graph several times
    slower (csrc/runtime/graph_threads.h). On the caller's thread, the load's rounds left the main thread's team
    alive under glm5next-server's scheduler thread: draft-MTP at 1 client went from 600-800 to 185-240 tok/s
    (bundled model q8_0, -t 2). Raises what time_rounds raises."""
    calibrations: list[DraftCalibration] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            calibrations.append(time_rounds(engine, n_max, budget_s, sequence_args))
        except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
            errors.append(e)

    thread = threading.Thread(target=run, name="glm5next-draft-calibration")
    thread.start()
    thread.join()
    wait_until_gone(thread)
    if errors:
        raise errors[0]
    return calibrations[0]


def wait_until_gone(thread: threading.Thread, timeout_s: float = 1.0) -> None:
    """Waits until a joined thread's OS thread has exited (at most timeout_s): join returns once its Python code is
    done, before the thread's C++ thread_local destructors and libgomp's team go (at pthread exit), and a graph run
    on another thread in between would count two live teams (graph_threads.h: a false warning; seen under load in
    the test suite). Linux (/proc/self/task); elsewhere it returns at once."""
    task = f"/proc/self/task/{thread.native_id}"
    deadline = time.perf_counter() + timeout_s
    while os.path.exists(task) and time.perf_counter() < deadline:
        time.sleep(0.0005)


def time_rounds(engine: _core.Engine, n_max: int, budget_s: float, sequence_args: dict) -> DraftCalibration:
    """Times draft-MTP rounds of 0..n_max drafts on `engine` and returns their costs relative to a round without
    drafts: verify passes of 1..n_max+1 rows (each at least the one of a row fewer: a longer pass never costs less,
    and noise must not say it does), draft step 0 and the later steps, and a deferred draft-head row (not timed here:
    the built-in ratio to step 0, scaled to the measured step 0). The rounds run on one scratch sequence
    (sequence_args: _core.Seq's, the model's cache type), freed on return: one, not one per kind, for the real
    model's KDA states take ~140 MiB per sequence. Each turn starts a kind's generator anew on the two-token scratch
    prompt and runs WARM_ROUNDS rounds (untimed), then times TURN_ROUNDS rounds, so that the kinds can take turns:
    the machine's swings then reach all of them alike, and each is timed as it runs after rounds of its own kind. A
    warmup round of each kind comes first (the weights first touched, the scratch sequence's graphs built; reported
    apart, outside the budget: as a kind's untimed rounds instead, the first kind timed touched weights that no
    round had: in one load each at -t 1, the bench preset's verify passes of 2..4 rows were priced at 1.31, 1.50,
    1.72 plain rounds, against 1.75, 2.32, 2.47 with the warmup apart); then turns are timed in order, one of each
    kind at least (one timed round each), more while less than budget_s seconds have passed since the warmup: the
    budget is exceeded by at most one turn, or by one turn of each kind when a model's turns are slower than
    budget_s / (n_max + 1) (the bench preset at -t 1: ~450 ms).

    Raises what _core.Seq and _core.Generator raise: RuntimeError when a device cannot hold the scratch caches,
    ValueError for n_max < 1, n_max >= the engine's n_batch, or logits that are NaN.
    """
    if n_max < 1:
        raise ValueError(f"draft calibration: n_max = {n_max}: must be >= 1")
    seq = _core.Seq(engine, len(SCRATCH_PROMPT) + (WARM_ROUNDS + max(TURN_ROUNDS)) * (n_max + 1),
                    **dict(sequence_args, n_checkpoints=0, draft_rows=True))
    kinds = [_core.Generator(seq, n_max=k, synthetic_accepted=float(k) if k else -1.0, adaptive=False,
                             temperature=0.0) for k in range(n_max + 1)]

    def turn(k: int, rounds: int, warm: int = WARM_ROUNDS) -> list[tuple[float, float]]:
        """`rounds` rounds of kind k timed after a fresh start and `warm` untimed rounds: (verify ms, draft ms) of
        each."""
        kinds[k].start(SCRATCH_PROMPT, cache_prompt=False)
        for _ in range(warm):
            kinds[k].step()
        out = []
        for _ in range(rounds):
            before = kinds[k].stats
            kinds[k].step()
            after = kinds[k].stats
            out.append((after["verify_ms"] - before["verify_ms"], after["draft_ms"] - before["draft_ms"]))
        return out

    t0 = time.perf_counter()
    for k in range(len(kinds)):
        turn(k, 0, warm=1)  # first touches the weights, builds the scratch sequence's graphs
    t1 = time.perf_counter()
    samples: list[list[tuple[float, float]]] = [[] for _ in kinds]
    for i in range(len(TURN_ROUNDS) * len(kinds)):  # kinds in turn; each at least once, then while the budget lasts
        if i >= len(kinds) and time.perf_counter() - t1 >= budget_s:
            break
        samples[i % len(kinds)] += turn(i % len(kinds), TURN_ROUNDS[i // len(kinds)])
    timed_ms = (time.perf_counter() - t1) * 1e3
    estimate = _core.DraftLengthPolicy.clipped_mean  # the policy's own estimator
    unit = estimate([v for v, _ in samples[0]])
    verify = [1.0]
    for kind in samples[1:]:
        verify.append(max(verify[-1], estimate([v for v, _ in kind]) / unit))
    draft = [estimate([d for _, d in kind]) / unit for kind in samples]
    built_in = _core.RoundCostPrior()
    first = max(draft[1], MIN_RATIO)
    later = max((draft[n_max] - draft[1]) / (n_max - 1), MIN_RATIO) if n_max > 1 else None
    prior = _core.RoundCostPrior(verify=verify, first=first, next=later if later is not None else built_in.next,
                                 row=built_in.row * first / built_in.first)
    return DraftCalibration(prior=prior, measured_next=later is not None, warmup_ms=(t1 - t0) * 1e3,
                            timed_ms=timed_ms, rounds=min(len(kind) for kind in samples))
