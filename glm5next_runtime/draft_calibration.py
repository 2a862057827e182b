"""Draft-MTP round costs measured at load (issue 28; docs/runtime.md, Draft length), so that the first
round of a process's first request chooses its drafts as a warmed-up draft length policy would.

A new DraftLengthPolicy prices the rounds it has not timed from a RoundCostPrior, in units of a round without
drafts. The built-in one says a verify row costs +0.25 of it; on this project's CPUs it costs 0.4-0.9 (bundled model
q8_0 at -t 2: verify passes of 1..4 rows 1, 1.42, 1.70, 2.03; the bench preset 1, 1.84, 2.4, 2.8). Until the policy
had timed verify passes of two row counts, a prior that low made drafting look up to 50% better than it was. Here
each round kind is timed on a scratch sequence of the model's engine instead: rounds of 0..n_max drafts (synthetic
acceptance, so each carries its full drafts), in turn, so that the machine's swings reach all kinds alike, and each
kind's median taken.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from . import _core

# The scratch prompt: two tokens (ids valid in every vocabulary); its rows only give the rounds a context.
SCRATCH_PROMPT = [0, 1]
# Timed rounds per draft count: at least one, at most as many as the policy's window of recent timings (kWindow).
MAX_ROUNDS = 9
# The smallest ratio reported for a draft step (two medians' difference can be ~0 or negative in noise).
MIN_RATIO = 0.01


@dataclass(frozen=True)
class DraftCalibration:
    """prior: the costs (_core.RoundCostPrior, units of a round without drafts); warmup_ms: the first round of each
    kind (graphs built, weights first touched: what llama-server's warmup run pays at load); timed_ms: the timed
    rounds; rounds: timed rounds per draft count."""
    prior: _core.RoundCostPrior
    warmup_ms: float
    timed_ms: float
    rounds: int

    def summary(self) -> str:
        """One line for a load report: the verify ratios and the time taken."""
        verify = ", ".join(f"{v:.2f}" for v in self.prior.verify)
        return (f"draft-MTP round costs (x a round without drafts): verify rows 1.. {verify}; draft step "
                f"{self.prior.first:.2f}, later steps {self.prior.next:.2f}; timed in {self.timed_ms:.0f} ms "
                f"({self.rounds} rounds each) after a {self.warmup_ms:.0f} ms warmup")


def calibrate(engine: _core.Engine, n_max: int, budget_s: float, sequence_args: dict) -> DraftCalibration:
    """Times draft-MTP rounds of 0..n_max drafts on `engine` and returns their costs relative to a round without
    drafts: verify passes of 1..n_max+1 rows, draft step 0 and the later steps (a deferred draft-head row keeps the
    built-in ratio). The rounds run on one scratch sequence (sequence_args: _core.Seq's, the model's cache type),
    freed on return: one, not one per kind, for the real model's KDA states take ~140 MiB per sequence. Each timed
    round starts its generator anew on the two-token scratch prompt (untimed), so that the kinds can take turns: the
    machine's swings then reach all of them alike. After a warmup round of each kind, rounds are timed in turn (one
    of each kind at least, at most MAX_ROUNDS each) until budget_s seconds of them have passed: the budget is
    exceeded by at most one round and the restarts.

    Raises what _core.Seq and _core.Generator raise: RuntimeError when a device cannot hold the scratch caches,
    ValueError for n_max < 1, n_max >= the engine's n_batch, or logits that are NaN.
    """
    if n_max < 1:
        raise ValueError(f"draft calibration: n_max = {n_max}: must be >= 1")
    seq = _core.Seq(engine, len(SCRATCH_PROMPT) + n_max + 1, **dict(sequence_args, n_checkpoints=0, draft_rows=True))
    kinds = [_core.Generator(seq, n_max=k, synthetic_accepted=float(k) if k else -1.0, adaptive=False,
                             temperature=0.0) for k in range(n_max + 1)]

    def round_ms(k: int) -> tuple[float, float]:
        """A round of kind k on a fresh start: (its verify ms, its draft ms)."""
        kinds[k].start(SCRATCH_PROMPT, cache_prompt=False)
        before = kinds[k].stats
        kinds[k].step()
        after = kinds[k].stats
        return after["verify_ms"] - before["verify_ms"], after["draft_ms"] - before["draft_ms"]

    t0 = time.perf_counter()
    for k in range(len(kinds)):
        round_ms(k)  # builds its graphs
    t1 = time.perf_counter()
    samples: list[list[tuple[float, float]]] = [[] for _ in kinds]
    for i in range(MAX_ROUNDS * len(kinds)):  # kinds in turn; each at least once, then while the budget lasts
        if i >= len(kinds) and time.perf_counter() - t1 >= budget_s:
            break
        samples[i % len(kinds)].append(round_ms(i % len(kinds)))
    timed_ms = (time.perf_counter() - t1) * 1e3
    verify = [statistics.median(v for v, _ in kind) for kind in samples]
    draft = [statistics.median(d for _, d in kind) for kind in samples]
    unit = verify[0]
    first = draft[1] / unit
    later = (draft[n_max] / unit - first) / (n_max - 1) if n_max > 1 else _core.RoundCostPrior().next
    return DraftCalibration(
        prior=_core.RoundCostPrior(verify=[v / unit for v in verify], first=max(first, MIN_RATIO),
                                   next=max(later, MIN_RATIO)),
        warmup_ms=(t1 - t0) * 1e3, timed_ms=timed_ms, rounds=len(samples[-1]))
