"""The engines a row times: the Runner protocol (one engine holding one sequence), OursRunner (glm5next's Model,
with its draft-MTP rounds) and LlamaCppRunner (llama-cpp-python over the same file), and load_runner, which turns a
failed load into a BenchError."""
from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..stderr_capture import captured_stderr
from .errors import BenchError

OURS = "glm5next"
UPSTREAM = "llama_cpp"


class Runner(Protocol):
    """One engine holding one sequence. `eval` is the only thing rows time."""

    key: str

    def reset(self) -> None: ...

    def eval(self, tokens: Sequence[int]) -> None:
        """Append `tokens` to the sequence and run the model over them (prefill in n_batch ubatches)."""

    def argmax(self) -> int:
        """Greedy next token after the last eval."""


class OursRunner:
    key = OURS

    def __init__(self, path: Path, n_ctx: int, n_threads: int, n_batch: int, **placement):
        """placement: Model's rpc / n_gpu_layers / cpu_moe / cache_type_k / warmup / override_kv / override_tensor
        (the bench's --rpc, -ngl, --cpu-moe, -ctk, --no-warmup, --override-kv, -ot)."""
        from ..model import Model
        self._load = partial(Model, path, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch, **placement)
        self.model = self._load()
        self._logits: np.ndarray | None = None
        # draft type -> a model whose draft layer has that type: requantizing is done once, at its load, and a
        # second Model is cheap (the weights are memory-mapped)
        self._by_draft_type = {"auto": self.model}

    def reset(self) -> None:
        self.model.reset()
        self._logits = None

    def eval(self, tokens: Sequence[int]) -> None:
        self._logits = self.model.eval(tokens)

    def argmax(self) -> int:
        assert self._logits is not None, "argmax before eval"
        return int(np.argmax(self._logits))

    def spec_decode(self, prompt: Sequence[int], n_gen: int, n_max: int, accept: float | None, share: str,
                    draft_type: str, adaptive: bool = False, op_profile: bool = False) -> tuple[int, float, dict]:
        """Greedy generation of n_gen tokens after `prompt` (untimed) in draft-MTP rounds (n_max 0: no drafts;
        adaptive: at most n_max, as the draft length policy chooses). Returns (tokens, seconds in the rounds, the
        generator's counters). op_profile: the rounds' graphs timed node by node (_core.Engine.op_profile), as the
        counters' "op_profile" (the seconds then count the profiling's syncs too)."""
        if draft_type not in self._by_draft_type:
            self._by_draft_type[draft_type] = self._load(spec_draft_type=draft_type)
        engine = self._by_draft_type[draft_type].engine
        g = self._by_draft_type[draft_type].generator(
            n_max=n_max, adaptive=adaptive, temperature=0.0, seed=0, index_share=share,
            synthetic_accepted=-1.0 if accept is None else accept - 1.0)
        out = [g.start(list(prompt))]
        if op_profile:
            engine.profile_ops(True)
        try:
            t0 = time.perf_counter()
            while len(out) < n_gen + 1:
                out += g.step()
            seconds = time.perf_counter() - t0
            profile = engine.op_profile()
        finally:
            if op_profile:
                engine.profile_ops(False)
        return n_gen, seconds, g.stats | ({"op_profile": profile} if op_profile else {})


# ggml's type ids of the cache types (ggml.h; llama_cpp exports F32, F16 and the quantized ones but not BF16)
GGML_TYPE_IDS = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2}


def llama_cache_kwargs(cache_type: str) -> dict[str, Any]:
    """llama_cpp.Llama's arguments for caches of `cache_type` (a name of cache_sizes.CACHE_TYPES): type_k and type_v,
    and flash attention for the quantized ones (llama.cpp creates no context for them without it)."""
    return dict(type_k=GGML_TYPE_IDS[cache_type], type_v=GGML_TYPE_IDS[cache_type],
                flash_attn=cache_type.startswith("q"))


def llama_kv_overrides(applied: Sequence[tuple[str, str, str]]) -> dict[str, bool | int | float | str]:
    """llama_cpp.Llama's kv_overrides (a dict whose values' Python types are the override types) from glm5next's
    applied --override-kv entries (Model.kv_overrides: (key as the file spells it, int|float|bool|str, value)):
    both engines get the same values, checked once by glm5next's loader."""
    cast = {"int": int, "float": float, "bool": lambda v: v == "true", "str": str}
    return {key: cast[kind](value) for key, kind, value in applied}


def llama_kv_override_array(L: Any, overrides: dict[str, bool | int | float | str]) -> Any:
    """The same overrides as llama.cpp's C array (llama_model_params.kv_overrides: llama_model_kv_override entries
    ending in one with an empty key), for llama-cpp-python's low-level API; None when there are none. `L`: the
    llama_cpp module. Keep the array alive while the model loads."""
    if not overrides:
        return None
    array = (L.llama_model_kv_override * (len(overrides) + 1))()
    for entry, (key, value) in zip(array, overrides.items()):
        entry.key = key.encode()
        if isinstance(value, bool):
            entry.tag, entry.value.val_bool = L.LLAMA_KV_OVERRIDE_TYPE_BOOL, value
        elif isinstance(value, int):
            entry.tag, entry.value.val_i64 = L.LLAMA_KV_OVERRIDE_TYPE_INT, value
        elif isinstance(value, float):
            entry.tag, entry.value.val_f64 = L.LLAMA_KV_OVERRIDE_TYPE_FLOAT, value
        else:
            entry.tag, entry.value.val_str = L.LLAMA_KV_OVERRIDE_TYPE_STR, value.encode()[:127]
    return array


class LlamaCppRunner:
    key = UPSTREAM

    def __init__(self, path: Path, n_ctx: int, n_threads: int, n_batch: int, cache_type_k: str = "f16",
                 kv_overrides: dict[str, bool | int | float | str] | None = None):
        """kv_overrides: llama_kv_overrides' dict (glm5next's applied --override-kv), or None."""
        from llama_cpp import Llama
        # llama.cpp logs warnings (e.g. about its V cache padding) straight to fd 2 even with verbose=False;
        # keep them out of the report, but show them if the load fails.
        with captured_stderr() as captured:
            try:
                self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                                 n_threads=n_threads, n_threads_batch=n_threads, verbose=False,
                                 kv_overrides=kv_overrides or None, **llama_cache_kwargs(cache_type_k))
            except Exception as e:
                log = captured().strip()
                raise BenchError(f"llama-cpp-python cannot load {path}: {e}"
                                 + (f"\n{log}" if log else "")
                                 + "\n(upstream loads files converted with --arch glm5-next)") from None
        self._n_vocab = self.llm.n_vocab()

    def reset(self) -> None:
        self.llm.reset()

    def eval(self, tokens: Sequence[int]) -> None:
        self.llm.eval(tokens)

    def argmax(self) -> int:
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self._n_vocab,))
        return int(np.argmax(logits))


def load_runner(cls: type, what: str, path: Path, n_ctx: int, threads: int, n_batch: int, **kwargs):
    try:
        return cls(path, n_ctx, threads, n_batch, **kwargs)
    except BenchError:
        raise
    except (ValueError, RuntimeError, OSError) as e:
        raise BenchError(f"{what} cannot load {path}: {e}") from None
