"""The server's Prometheus metrics (GET /metrics), named after llama-server's with a glm5next_ prefix.

Counters add up every finished generation; the tokens-per-second gauges are totals over totals (the average
throughput since start); the slot gauges are read live from the pool; draft acceptance per position is counted
(drafted and accepted per position) and its rate since start is a gauge.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from .slots import SlotPool


class ServerMetrics:
    """One registry per server (so that several apps can live in one process, e.g. in tests)."""

    def __init__(self, pool: SlotPool):
        r = self.registry = CollectorRegistry()
        self.prompt_tokens = Counter("glm5next_prompt_tokens", "Prompt tokens evaluated", registry=r)
        self.predicted_tokens = Counter("glm5next_tokens_predicted", "Tokens generated", registry=r)
        self.prompt_seconds = Counter("glm5next_prompt_seconds", "Time spent evaluating prompts", registry=r)
        self.predicted_seconds = Counter("glm5next_tokens_predicted_seconds", "Time spent generating", registry=r)
        self.prompt_rate = Gauge("glm5next_prompt_tokens_seconds", "Average prompt throughput in tokens/s",
                                 registry=r)
        self.predicted_rate = Gauge("glm5next_predicted_tokens_seconds", "Average generation throughput in tokens/s",
                                    registry=r)
        self.requests = Counter("glm5next_requests", "Finished generation requests", ["endpoint"], registry=r)
        processing = Gauge("glm5next_requests_processing", "Requests holding a slot", registry=r)
        processing.set_function(lambda: pool.size - pool.idle)
        deferred = Gauge("glm5next_requests_deferred", "Requests waiting for a slot", registry=r)
        deferred.set_function(lambda: pool.waiting)
        self.drafts = Counter("glm5next_spec_drafts", "Draft-MTP rounds that carried drafts", registry=r)
        self.drafted = Counter("glm5next_spec_draft_tokens", "Draft tokens verified", registry=r)
        self.accepted = Counter("glm5next_spec_draft_tokens_accepted", "Draft tokens accepted", registry=r)
        self.mean_length = Gauge("glm5next_spec_mean_accepted_length",
                                 "Tokens per drafting round (accepted drafts + 1), average since start", registry=r)
        self.drafted_at = Counter("glm5next_spec_position_drafted", "Rounds that drafted position N (1 = first)",
                                  ["position"], registry=r)
        self.accepted_at = Counter("glm5next_spec_position_accepted", "Rounds that accepted position N (1 = first)",
                                   ["position"], registry=r)
        self.acceptance = Gauge("glm5next_spec_acceptance_rate",
                                "Acceptance rate of draft position N (1 = first draft token) since start",
                                ["position"], registry=r)
        # prometheus_client counters cannot be read back (publicly), so the gauges' inputs are kept here too
        self._totals = dict.fromkeys(("prompt_tokens", "prompt_s", "predicted_tokens", "predicted_s", "drafts",
                                      "accepted"), 0.0)
        self._per_position: dict[int, list[int]] = {}  # position -> [drafted, accepted]

    def observe(self, endpoint: str, metrics: dict) -> None:
        """Count one finished generation; `metrics` is its GenerationResult.metrics."""
        t = self._totals
        self.requests.labels(endpoint=endpoint).inc()
        for counter, key, value in ((self.prompt_tokens, "prompt_tokens", metrics["n_prompt_tokens"]),
                                    (self.prompt_seconds, "prompt_s", metrics["prompt_ms"] / 1e3),
                                    (self.predicted_tokens, "predicted_tokens", metrics["n_generated"]),
                                    (self.predicted_seconds, "predicted_s", metrics["decode_ms"] / 1e3)):
            counter.inc(value)
            t[key] += value
        self.prompt_rate.set(t["prompt_tokens"] / t["prompt_s"] if t["prompt_s"] > 0 else 0.0)
        self.predicted_rate.set(t["predicted_tokens"] / t["predicted_s"] if t["predicted_s"] > 0 else 0.0)
        if metrics["n_drafts"]:
            self.drafts.inc(metrics["n_drafts"])
            self.drafted.inc(metrics["n_drafted"])
            self.accepted.inc(metrics["n_accepted"])
            t["drafts"] += metrics["n_drafts"]
            t["accepted"] += metrics["n_accepted"]
            self.mean_length.set((t["accepted"] + t["drafts"]) / t["drafts"])
            for i, (drafted, accepted) in enumerate(zip(metrics["drafted_at"], metrics["accepted_at"])):
                pos = self._per_position.setdefault(i + 1, [0, 0])
                pos[0] += drafted
                pos[1] += accepted
                self.drafted_at.labels(position=str(i + 1)).inc(drafted)
                self.accepted_at.labels(position=str(i + 1)).inc(accepted)
                if pos[0]:
                    self.acceptance.labels(position=str(i + 1)).set(pos[1] / pos[0])

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
