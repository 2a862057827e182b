"""Several generations in one request, as llama-server has them: `n` (its n_cmpl) choices per prompt and several
prompts (a completion's list of prompts). Each generation is the request it would be on its own, run one after
another here (llama-server runs them on as many slots at once); choice i > 0 of a prompt is llama-server's child
task: its seed is the request's (or the server's --seed) plus i, a random seed stays random, and it takes any slot.
The generations are in order: prompt by prompt, each prompt's choices in turn (llama-server's result index).

OpenAI's shapes answer one body with every generation as a choice (index k), the usage summed (each prompt's tokens
once per prompt, as OpenAI counts them; llama-server reports the first generation's); the native /completion
answers a list of its bodies, each with its index. A single generation keeps its own body.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from .schemas import GenerationRequest

Body = TypeVar("Body", bound=GenerationRequest)
SEED_SPACE = 2**64  # the engine's seeds: a derived seed wraps around


def choice_bodies(body: Body, default_seed: int | None) -> list[Body]:
    """The request of each of `body`'s choices (body.choices()), choice 0 `body` itself; default_seed: the server's
    --seed (None: random)."""
    seed = body.seed if body.seed is not None and body.seed >= 0 else default_seed
    out = [body]
    for i in range(1, body.choices()):
        update: dict[str, Any] = {"id_slot": -1}
        if seed is not None:
            update["seed"] = (seed + i) % SEED_SPACE
        out.append(body.model_copy(update=update))
    return out


def merge_choices(bodies: Sequence[dict[str, Any]], per_prompt: int) -> dict[str, Any]:
    """One OpenAI-shaped body of the generations' `bodies` (in order; per_prompt: choices per prompt): the first,
    every choice in order with its index, usage summed (prompt tokens once per prompt)."""
    out = dict(bodies[0])
    out["choices"] = [b["choices"][0] | {"index": k} for k, b in enumerate(bodies)]
    firsts = bodies[::per_prompt]
    prompt = sum(b["usage"]["prompt_tokens"] for b in firsts)
    completion = sum(b["usage"]["completion_tokens"] for b in bodies)
    cached = sum(b["usage"]["prompt_tokens_details"]["cached_tokens"] for b in firsts)
    out["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                    "prompt_tokens_details": {"cached_tokens": cached}}
    return out


def native_list(bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The native /completion's answer to several generations: their bodies in order, each with its index."""
    return [b | {"index": k} for k, b in enumerate(bodies)]
