"""What the slots are doing, as llama-server reports it: each request's parameters in llama-server's names (a
/completion response's `generation_settings`, /props' default `params`, /slots' `params`), and each slot's last
task for GET /slots (its prompt's size, how far its generation has come: read live from its GenerationStream; once
it ended, n_decoded 0 and n_remain -1, as llama-server resets the slot)."""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..generate import GenerationStream
from .slots import SlotPool

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # the seed llama-server reports for a request that draws a random one
SAMPLERS = ["temperature", "top_k", "top_p", "min_p"]  # the order _core.Sampler applies them in


def task_params(kwargs: Mapping[str, Any], n_predict: int, stream: bool, spec: Mapping[str, Any],
                ignore_eos: bool = False) -> dict[str, Any]:
    """llama-server's task params of a generation: `kwargs` are Model.generate's (temperature, top_k, top_p, min_p,
    seed, stop, spec_n_max, and logprobs and logit_bias when given), n_predict its token limit (-1: none), spec the
    slot model's speculation settings (Model.spec), ignore_eos the request's (its bans are in logit_bias). The
    samplers this server does not have are reported off, with the values that turn them off. logit_bias is
    llama-server's list of {"bias", "token"}, a ban's -inf as null (what its JSON writer makes of it)."""
    seed = kwargs["seed"]
    stop = kwargs["stop"]
    n_max = kwargs["spec_n_max"]
    return {
        "n_predict": n_predict, "max_tokens": n_predict,
        "seed": LLAMA_DEFAULT_SEED if seed is None else seed,
        "temperature": kwargs["temperature"], "top_k": kwargs["top_k"], "top_p": kwargs["top_p"],
        "min_p": kwargs["min_p"],
        "typical_p": 1.0, "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
        "dynatemp_range": 0.0, "xtc_probability": 0.0, "dry_multiplier": 0.0, "mirostat": 0, "top_n_sigma": -1.0,
        "stop": [stop] if isinstance(stop, str) else list(stop or []),
        "stream": stream, "n_probs": kwargs.get("logprobs") or 0, "min_keep": 0, "ignore_eos": ignore_eos,
        "logit_bias": [{"bias": None if math.isinf(bias) else bias, "token": token}
                       for token, bias in kwargs.get("logit_bias", [])],
        "samplers": SAMPLERS,
        "speculative.n_max": spec["n_max"] if n_max is None else n_max,
        "speculative.n_min": spec["n_min"], "speculative.p_min": spec["p_min"],
    }


def prompt_cache_line(task: "SlotTask", metrics: Mapping[str, Any]) -> str:
    """What the prompt cache did for `task` (logged at -v, issue 25): its prompt's tokens, those resumed and from
    where (the sequence as the slot's last request left it, or a context checkpoint at that row), those evaluated."""
    cached, source = metrics["n_cached_tokens"], metrics["cache_source"]
    where = {"sequence": " from the slot's sequence", "checkpoint": f" from the context checkpoint at row {cached}",
             "none": ""}[source]
    return (f"slot {task.slot} task {task.id}: prompt {task.n_prompt_tokens} tokens, {cached} resumed{where}, "
            f"{task.n_prompt_tokens - cached} evaluated")


@dataclass(frozen=True)
class SlotTask:
    """One request on one slot: `stream` shows its generated tokens as they come and its result at the end."""
    id: int
    slot: int
    params: dict[str, Any]
    n_prompt_tokens: int
    stream: GenerationStream


class SlotTasks:
    """The last task of every slot of `pool`. Use from the event loop."""

    def __init__(self, pool: SlotPool):
        self._pool = pool
        self._last: list[SlotTask | None] = [None] * pool.size
        self._ids = itertools.count()

    def begin(self, slot: int, params: dict[str, Any], n_prompt_tokens: int, stream: GenerationStream) -> SlotTask:
        """Record the task slot `slot` (an index into the pool's models) starts now."""
        task = SlotTask(next(self._ids), slot, params, n_prompt_tokens, stream)
        self._last[slot] = task
        return task

    def describe(self) -> list[dict[str, Any]]:
        """GET /slots: per slot its id, context, whether it speculates and is busy, and (once it has served a
        request) that task's params, prompt size and progress, in llama-server's shape."""
        return [self._describe(i) for i in range(self._pool.size)]

    def _describe(self, i: int) -> dict[str, Any]:
        model = self._pool.models[i]
        busy = not self._pool.is_free(model)
        out: dict[str, Any] = {"id": i, "n_ctx": model.n_ctx, "speculative": model.spec_type == "draft-mtp",
                               "is_processing": busy}
        task = self._last[i]
        if task is None:
            return out
        result = task.stream.result
        cached = result.metrics["n_cached_tokens"] if result is not None else 0
        source = result.metrics["cache_source"] if result is not None else "none"
        evaluated = task.n_prompt_tokens - cached if result is not None else 0
        running = busy and result is None
        # llama-server resets a slot's budget when its task ends: an idle slot has decoded nothing, no limit left
        n_decoded = len(task.stream.tokens) if running else 0
        n_predict = task.params["n_predict"] if running else -1
        return out | {
            "id_task": task.id, "n_prompt_tokens": task.n_prompt_tokens, "n_prompt_tokens_processed": evaluated,
            "n_prompt_tokens_cache": cached, "prompt_cache_source": source, "params": task.params,
            "next_token": [{"has_next_token": running,
                            "has_new_line": result is not None and "\n" in result.text,
                            "n_remain": -1 if n_predict < 0 else n_predict - n_decoded, "n_decoded": n_decoded}],
        }
