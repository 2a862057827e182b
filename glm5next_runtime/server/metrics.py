"""The server's Prometheus metrics (GET /metrics, with --metrics as in llama-server).

What llama-server has is under its names, types, help texts and meanings (`llamacpp:*`, written as its metrics
handler writes them), so that dashboards built for llama-server read this server:
    counters  prompt_tokens_total (prompt tokens evaluated: those resumed from a cache are not),
              prompt_tokens_cached_total (those resumed), prompt_seconds_total, tokens_predicted_total,
              tokens_predicted_seconds_total, n_decode_total (trunk forward passes: prefill ubatches and decode or
              verify rounds), n_tokens_max (the longest sequence, prompt and generation), spec_decode_num_drafts_total
              (rounds that carried drafts), spec_decode_num_draft_tokens_total, spec_decode_num_accepted_tokens_total,
              spec_decode_num_accepted_tokens_per_pos_total{position="N"} (after the first drafting request)
    gauges    prompt_tokens_seconds, predicted_tokens_seconds (throughput since the previous scrape: llama-server
              starts a new bucket on each), requests_processing (slots busy), requests_deferred (requests queued),
              n_busy_slots_per_decode
n_busy_slots_per_decode is 1 once anything ran: a forward pass runs one slot's sequence, never a batch of several
slots' (llama-server's llama_decode takes every busy slot at once).

What only this server has is under glm5next_* (prometheus_client): requests per endpoint, requests cancelled,
drafted rounds per draft position, the acceptance rate per position and the mean accepted length since start.
prometheus_client would name a counter's TYPE line and add _created samples unlike llama-server, hence the
llamacpp lines are written here.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from .slots import SlotPool

PREFIX = "llamacpp:"


def _number(value: float) -> str:
    """A sample value as llama-server prints it (5, 0.25; integers in full)."""
    return f"{value:.17g}"


class ServerMetrics:
    """One registry per server (so that several apps can live in one process, e.g. in tests)."""

    def __init__(self, pool: SlotPool):
        self._pool = pool
        self._n_batch = pool.models[0].n_batch
        r = self.registry = CollectorRegistry()
        self.requests = Counter("glm5next_requests", "Finished generation requests", ["endpoint"], registry=r)
        self.cancelled = Counter("glm5next_requests_cancelled", "Requests dropped because their client went away "
                                 "(queued for a slot or generating)", registry=r)
        self.mean_length = Gauge("glm5next_spec_mean_accepted_length",
                                 "Tokens per drafting round (accepted drafts + 1), average since start", registry=r)
        self.drafted_at = Counter("glm5next_spec_position_drafted", "Rounds that drafted position N (1 = first)",
                                  ["position"], registry=r)
        self.rounds = Counter("glm5next_spec_rounds", "Rounds allowed N drafts (N = 0: none; the draft length "
                              "policy's choices, --spec-draft-adaptive)", ["drafts"], registry=r)
        self.acceptance = Gauge("glm5next_spec_acceptance_rate",
                                "Acceptance rate of draft position N (1 = first draft token) since start",
                                ["position"], registry=r)
        self._totals = dict.fromkeys(("prompt_tokens", "cached_tokens", "prompt_s", "predicted_tokens", "predicted_s",
                                      "n_decode", "drafts", "drafted", "accepted"), 0.0)
        self._bucket = dict.fromkeys(("prompt_tokens", "prompt_s", "predicted_tokens", "predicted_s"), 0.0)
        self._n_tokens_max = 0
        self._per_position: dict[int, list[int]] = {}  # position -> [drafted, accepted]

    def observe(self, endpoint: str, metrics: dict) -> None:
        """Count one finished generation; `metrics` is its GenerationResult.metrics."""
        t = self._totals
        self.requests.labels(endpoint=endpoint).inc()
        evaluated = metrics["n_prompt_tokens"] - metrics["n_cached_tokens"]
        t["cached_tokens"] += metrics["n_cached_tokens"]
        for key, value in (("prompt_tokens", evaluated), ("prompt_s", metrics["prompt_ms"] / 1e3),
                           ("predicted_tokens", metrics["n_generated"]), ("predicted_s", metrics["decode_ms"] / 1e3)):
            t[key] += value
            self._bucket[key] += value
        # the prompt's ubatches, then one pass per round after the prompt's (a round emits its accepted drafts + 1)
        t["n_decode"] += -(-evaluated // self._n_batch) + max(0, metrics["n_generated"] - 1 - metrics["n_accepted"])
        self._n_tokens_max = max(self._n_tokens_max, metrics["n_prompt_tokens"] + metrics["n_generated"])
        for k, n in enumerate(metrics["rounds_at_length"]):
            if n:
                self.rounds.labels(drafts=str(k)).inc(n)
        if metrics["n_drafts"]:
            for key, name in (("drafts", "n_drafts"), ("drafted", "n_drafted"), ("accepted", "n_accepted")):
                t[key] += metrics[name]
            self.mean_length.set((t["accepted"] + t["drafts"]) / t["drafts"])
            for i, (drafted, accepted) in enumerate(zip(metrics["drafted_at"], metrics["accepted_at"])):
                pos = self._per_position.setdefault(i + 1, [0, 0])
                pos[0] += drafted
                pos[1] += accepted
                self.drafted_at.labels(position=str(i + 1)).inc(drafted)
                if pos[0]:
                    self.acceptance.labels(position=str(i + 1)).set(pos[1] / pos[0])

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (llama-server's first); starts a new throughput bucket."""
        text = self._llamacpp() + generate_latest(self.registry).decode()
        self._bucket = dict.fromkeys(self._bucket, 0.0)
        return text.encode()

    def _llamacpp(self) -> str:
        t, b = self._totals, self._bucket
        counters = [
            ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", t["prompt_tokens"]),
            ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", t["cached_tokens"]),
            ("prompt_seconds_total", "Total time spent processing prompts", t["prompt_s"]),
            ("tokens_predicted_total", "Number of generation tokens processed", t["predicted_tokens"]),
            ("tokens_predicted_seconds_total", "Total time spent generating tokens", t["predicted_s"]),
            ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal "
             "decoding", t["n_decode"]),
            ("n_tokens_max", "Largest observed sequence length (prompt + generation)", self._n_tokens_max),
            ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", t["drafted"]),
            ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
             t["accepted"]),
            ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
             t["drafts"]),
        ]
        gauges = [
            ("prompt_tokens_seconds", "Average prompt throughput in tokens/s",
             b["prompt_tokens"] / b["prompt_s"] if b["prompt_s"] > 0 else 0.0),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s",
             b["predicted_tokens"] / b["predicted_s"] if b["predicted_s"] > 0 else 0.0),
            ("requests_processing", "Number of requests processing", self._pool.size - self._pool.idle),
            ("requests_deferred", "Number of requests deferred", self._pool.waiting),
            ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             1.0 if t["n_decode"] else 0.0),
        ]
        lines = []
        for kind, metrics in (("counter", counters), ("gauge", gauges)):
            for name, help, value in metrics:
                lines += [f"# HELP {PREFIX}{name} {help}", f"# TYPE {PREFIX}{name} {kind}",
                          f"{PREFIX}{name} {_number(value)}"]
        if self._per_position:
            name = f"{PREFIX}spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f"# HELP {name} Accepted tokens per draft position.", f"# TYPE {name} counter"]
            lines += [f'{name}{{position="{pos}"}} {accepted}' for pos, (_, accepted) in self._per_position.items()]
        return "\n".join(lines) + "\n"
