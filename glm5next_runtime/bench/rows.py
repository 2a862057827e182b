"""The llama-bench rows: Inputs (the token ids every engine and repetition is fed, drawn by draw_inputs), and Row
(name, run, params), whose `run(runner)` performs one timed repetition of pp N @ dD or tg N @ dD on a Runner and
returns (tokens, seconds); build_rows lists them in llama-bench's order."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..tokenizer import NORMAL
from .runners import OursRunner, Runner

Timing = tuple[int, float]  # (tokens processed, seconds spent in eval calls)


class Row(NamedTuple):
    """A benchmark row: `run(runner)` does one timed repetition; `params` go into csv/json (n_prompt, ...)."""
    name: str
    run: Callable[[Runner], Timing]
    params: dict[str, Any]


@dataclass(frozen=True)
class Inputs:
    """Token ids shared by every engine and repetition: depth prefill, prompt and tg inputs."""
    depth: list[int]
    prompt: list[int]
    gen: list[int]
    tg_argmax: bool


def draw_inputs(ours: OursRunner, n_depth: int, n_prompt: int, n_gen: int, seed: int, tg_argmax: bool) -> Inputs:
    types = ours.model.tokenizer.token_types
    normal = np.array([i for i, ty in enumerate(types) if ty == NORMAL] or range(ours.model.n_vocab))
    rng = np.random.default_rng(seed)
    def draw(n: int) -> list[int]:
        return normal[rng.integers(0, len(normal), n)].tolist()
    return Inputs(depth=draw(n_depth), prompt=draw(n_prompt), gen=draw(n_gen + 1), tg_argmax=tg_argmax)


def row_name(kind: str, n: int, depth: int) -> str:
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")


def _prefill(runner: Runner, inputs: Inputs, depth: int) -> None:
    runner.reset()
    if depth:
        runner.eval(inputs.depth[:depth])


def pp_row(n_prompt: int, depth: int, inputs: Inputs) -> Row:
    def run(runner: Runner) -> Timing:
        _prefill(runner, inputs, depth)
        t0 = time.perf_counter()
        runner.eval(inputs.prompt[:n_prompt])
        return n_prompt, time.perf_counter() - t0
    return Row(row_name("pp", n_prompt, depth), run, {"n_prompt": n_prompt, "n_gen": 0, "n_depth": depth})


def tg_row(n_gen: int, depth: int, inputs: Inputs) -> Row:
    def run(runner: Runner) -> Timing:
        _prefill(runner, inputs, depth)
        token, spent = inputs.gen[0], 0.0
        for i in range(n_gen):
            t0 = time.perf_counter()
            runner.eval([token])
            spent += time.perf_counter() - t0
            token = runner.argmax() if inputs.tg_argmax else inputs.gen[i + 1]
        return n_gen, spent
    return Row(row_name("tg", n_gen, depth), run, {"n_prompt": 0, "n_gen": n_gen, "n_depth": depth})


def build_rows(prompts: Sequence[int], gens: Sequence[int], depths: Sequence[int], inputs: Inputs) -> list[Row]:
    """llama-bench order: per depth, the pp rows then the tg rows (0 in -p / -n skips that kind)."""
    rows: list[Row] = []
    for d in depths:
        rows += [pp_row(p, d, inputs) for p in prompts if p > 0]
        rows += [tg_row(n, d, inputs) for n in gens if n > 0]
    return rows
