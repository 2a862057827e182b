"""The Python face of a loaded model: the native loader, the tokenizer and the run settings in one object."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _core
from .placement import CPU, plan_placement
from .tokenizer import Tokenizer

SUPPORTED_TOKENIZERS = {"gpt2": ("glm4",)}  # tokenizer.ggml.model -> accepted tokenizer.ggml.pre


def offload_devices() -> list[str]:
    """ggml device names that can hold weights: "CPU" first, then GPUs (accelerators such as BLAS only speed up
    CPU work and are not placement targets)."""
    gpus = [name for name, _desc, kind in _core.backend_devices() if kind in ("gpu", "igpu")]
    return [CPU, *gpus]


def _tokenizer(core: _core.Model) -> Tokenizer:
    model, pre = _meta(core, "tokenizer.ggml.model", ""), _meta(core, "tokenizer.ggml.pre", "")
    if model not in SUPPORTED_TOKENIZERS or (pre and pre not in SUPPORTED_TOKENIZERS[model]):
        raise ValueError(f"{core.path}: tokenizer {model!r} with pre-tokenizer {pre!r} is not supported "
                         f"(expected 'gpt2' with 'glm4')")
    tokens, types, merges, special = core.vocab()
    return Tokenizer.from_gguf_vocab(tokens, types, merges, special,
                                     add_bos=bool(_meta(core, "tokenizer.ggml.add_bos_token", False)),
                                     add_eos=bool(_meta(core, "tokenizer.ggml.add_eos_token", False)))


def _meta(core: _core.Model, key: str, default: Any) -> Any:
    try:
        return core.metadata(key)
    except KeyError:
        return default


class Model:
    """A glm5next GGUF ready for inference.

    Args:
        path: the .gguf file.
        n_ctx: context size in tokens (-c), >= 1.
        n_threads: CPU threads (-t); None = all cores.
        n_batch: prompt tokens per forward pass (-b), >= 1.
        override_kv: llama.cpp --override-kv "KEY=TYPE:VALUE" strings (see _core.Model).
        n_gpu_layers, cpu_moe, n_cpu_moe, override_tensor: placement as in llama-server (see placement.py).
    Raises:
        ValueError: a malformed file, key, tensor, override or placement rule (the message names it), a
            non-positive n_ctx / n_batch / n_threads, or a tokenizer this runtime does not implement.
    """

    def __init__(self, path: str | os.PathLike, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
                 override_kv: Sequence[str] = (), n_gpu_layers: int = 0, cpu_moe: bool = False, n_cpu_moe: int = 0,
                 override_tensor: Sequence[str] = ()):
        for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_threads", n_threads)):
            if value is not None and value < 1:
                raise ValueError(f"{name} = {value}: must be >= 1")
        self._core = _core.Model(os.fspath(path), list(override_kv))
        self.tokenizer = _tokenizer(self._core)
        self._n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.n_batch = n_batch
        self._placement_args = dict(n_gpu_layers=n_gpu_layers, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe,
                                    override_tensor=tuple(override_tensor))
        self._placement = self._plan()  # plan at load so a bad -ot rule fails here, naming it
        self._engine = _core.Engine(self._core, n_ctx, n_batch, self.n_threads)
        self._last: dict | None = None

    def eval(self, tokens: Sequence[int], logits_all: bool = False) -> np.ndarray:
        """Append `tokens` to the sequence and run the trunk over them (prefill in ubatches of n_batch).

        Returns float32 logits: [len(tokens), n_vocab] with logits_all, else [n_vocab] for the last row. The
        post-norm hidden states and the indexer selections of these rows are then in `hidden` and
        `selected_positions(layer)`. Raises ValueError for no tokens, an id outside the vocabulary, or more
        tokens than the context has left (math: ../shared/spec/model.md, Trunk).
        """
        self._last = self._engine.eval([int(t) for t in tokens], logits_all)
        logits = self._last["logits"]
        return logits if logits_all else logits[0]

    def reset(self) -> None:
        """Forget the sequence: caches cleared, n_past = 0."""
        self._engine.reset()
        self._last = None

    @property
    def n_past(self) -> int:
        """Tokens in the sequence."""
        return self._engine.n_past

    @property
    def hidden(self) -> np.ndarray:
        """float32 [n_tokens, n_embd]: post-norm hidden states of the last eval's rows (the draft head's input)."""
        return self._require_eval()["hidden"]

    @property
    def dsa_layers(self) -> list[int]:
        """Trunk DSA layer indices, in order."""
        return list(self._require_eval()["pools"])

    def selected_positions(self, layer: int) -> list[set[int]]:
        """Per row of the last eval, the key positions DSA layer `layer` attends: the rows of the chosen pools
        plus, with kpool_select_tail, the incomplete pool ending at the row (model.md, Indexer)."""
        pools = self._require_eval()["pools"][layer]
        hp = self.hparams
        kpool, tail = hp["idx_kpool"], hp["idx_select_tail"]
        first = self.n_past - len(pools)
        out = []
        for t, row in enumerate(pools):
            pos = first + t
            keys = {int(p) * kpool + i for p in row if p >= 0 for i in range(kpool)}
            if tail:
                keys.update(range((pos + 1) // kpool * kpool, pos + 1))
            out.append(keys)
        return out

    def _require_eval(self) -> dict:
        if self._last is None:
            raise RuntimeError("no eval since the model was loaded or reset")
        return self._last

    @property
    def path(self) -> str:
        return self._core.path

    @property
    def n_vocab(self) -> int:
        return self._core.n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def hparams(self) -> dict:
        """Every hyper-parameter after overrides (see _core.Model.hparams for the keys)."""
        return self._core.hparams

    @property
    def chat_template(self) -> str | None:
        return self._core.chat_template

    def metadata(self, key: str) -> Any:
        """Value of GGUF key `key` after overrides (either arch prefix works). Raises KeyError when absent."""
        return self._core.metadata(key)

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Token ids of `text` (see Tokenizer.encode)."""
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of `ids`. Raises ValueError for an id outside the vocab."""
        return self.tokenizer.decode(ids)

    def placement(self) -> dict[str, str]:
        """Tensor name -> device name ("CPU", "CUDA0", ...) under this model's placement settings."""
        return dict(self._placement)

    def _plan(self) -> dict[str, str]:
        hp = self.hparams
        names = [name for name, *_ in self._core.tensors()]
        return plan_placement(names, hp["n_layer_all"], hp["n_trunk"], offload_devices(), **self._placement_args)
