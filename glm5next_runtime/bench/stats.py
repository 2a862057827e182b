"""What the bench measures, summed up: Stats (a row's timed repetitions and their t/s summary), paired_speedup (the
geometric mean of back-to-back time ratios, ± its standard error) and memory_snapshot (this process's resident
memory)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Stats:
    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    @property
    def tps(self) -> list[float]:
        return [n / s for n, s in zip(self.tokens, self.seconds)]

    def summary(self) -> dict[str, Any]:
        tps = self.tps
        return {"tps_median": statistics.median(tps), "tps_mean": statistics.fmean(tps),
                "tps_stdev": statistics.stdev(tps) if len(tps) > 1 else 0.0,
                "tps_min": min(tps), "tps_max": max(tps), "tps_samples": tps, "seconds": list(self.seconds)}


def paired_speedup(log_ratios: list[float]) -> dict[str, float]:
    """speedup: the geometric mean of the paired time ratios (a prompt's rounds without drafts, then the same rounds
    with, back to back), and speedup_se its standard error (delta method; 0 for a single pair). Pairs, not ratios
    of medians: on a shared machine the speed of the same 128-token generation varies by ~15-20% from one run to the
    next (measured: plain decoding against itself, 200 pairs, 2 cores), which back-to-back pairs largely cancel."""
    mean = statistics.fmean(log_ratios)
    se = statistics.stdev(log_ratios) / math.sqrt(len(log_ratios)) if len(log_ratios) > 1 else 0.0
    return {"speedup": math.exp(mean), "speedup_se": math.exp(mean) * se}


def memory_snapshot() -> dict[str, int] | None:
    """VmRSS / RssAnon / RssFile of this process in bytes (None where /proc is unavailable)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out or None
