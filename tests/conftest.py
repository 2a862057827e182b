"""Shared fixtures: generated checkpoints and their conversions, cached for the whole session."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from make_checkpoint import make_checkpoint  # noqa: E402
from rpc_servers import RpcServers  # noqa: E402


class Checkpoints:
    """make(name, preset, **fields) -> checkpoint dir; convert(ckpt, **options) -> GGUF path (both cached)."""

    def __init__(self, root: Path):
        self.root = root
        self._made: dict[str, Path] = {}

    def make(self, name: str, preset: str = "tiny", **fields) -> Path:
        if name not in self._made:
            self._made[name] = make_checkpoint(self.root / name, preset, **fields)
        return self._made[name]

    def convert(self, ckpt: Path, tag: str = "", **options) -> Path:
        from glm5next_convert import convert
        out = ckpt.parent / f"{ckpt.name}{tag}-{options.get('outtype', 'auto')}.gguf"
        if not out.exists():
            convert(ckpt, out, progress=False, log=lambda m: None, **options)
        return out


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> Checkpoints:
    return Checkpoints(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="session")
def plain_gguf(checkpoints) -> Path:
    """The tiny preset without a NextN layer (f32): a model that cannot speculate."""
    return checkpoints.convert(checkpoints.make("server-no-nextn", "tiny", dtype="f32", nextn=False),
                               outtype="f32")


@pytest.fixture(scope="session")
def predictable_gguf(checkpoints) -> Path:
    """The "predictable" preset (f32): the NextN head drafts what the trunk will say, so drafts are accepted at
    every position, and greedy text from most prompts runs for thousands of tokens."""
    return checkpoints.convert(checkpoints.make("spec-predictable", "predictable", dtype="f32"), outtype="f32")


@pytest.fixture(scope="session")
def rpc_servers() -> RpcServers:
    """glm5next-rpc-server processes on loopback, by name, alive until the test process ends (see rpc_servers.py)."""
    return RpcServers()


def new_sequence(model, n_ctx: int, n_batch: int, n_threads: int, **engine_args):
    """A _core.Seq of n_ctx rows on a new _core.Engine of `model` (a _core.Model; n_batch rows per ubatch,
    n_threads CPU threads; engine_args: draft_type, draft_model, n_verify_rows)."""
    from glm5next_runtime import _core
    return _core.Seq(_core.Engine(model, n_batch, n_threads, **engine_args), n_ctx)


def random_tokens(n: int, vocab: int = 380, seed: int = 0) -> list[int]:
    """Token ids from the BPE part of the generated vocab (no special tokens)."""
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def hf_logits(ckpt: Path, tokens: list[int]) -> np.ndarray:
    """transformers 5.23 logits [n_tokens, n_vocab] (float32) of the trunk, one forward pass."""
    import torch
    from transformers import Glm5NextForConditionalGeneration
    from transformers.utils import logging

    logging.set_verbosity_error()  # the NextN layer is an expected "unexpected key"
    model = Glm5NextForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa")
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0].numpy()


def llama_cpp_logits(gguf_path: Path, tokens: list[int], cache_type: str = "f32") -> np.ndarray:
    """llama-cpp-python 0.3.36 logits [n_tokens, n_vocab] with `cache_type` caches ("f32" by default: its default
    f16 cache costs ~1e-3; "f16", "q8_0", "q4_0" to measure that)."""
    from llama_cpp import Llama

    from glm5next_runtime.bench.runners import llama_cache_kwargs

    n = len(tokens)
    llm = Llama(model_path=str(gguf_path), n_ctx=max(256, n + 16), n_batch=n, n_ubatch=n, logits_all=True,
                n_threads=2, verbose=False, **llama_cache_kwargs(cache_type))
    llm.eval(tokens)
    out = np.array(llm.scores[:n], dtype=np.float32)
    llm.close()
    return out


def hf_trunk(ckpt: Path, tokens: list[int], exact: bool = False) -> tuple[np.ndarray, np.ndarray,
                                                                         dict[int, list[set[int]]]]:
    """transformers 5.23 on the trunk: logits [n, n_vocab], post-norm hidden [n, n_embd] and, per full-indexer
    layer, the set of key rows each query row selects (the indexer's own output, captured by a hook). In float32,
    or with `exact` in float64 (the yardstick of fp32 rounding; eager experts: torch's grouped_mm has no float64),
    whose arrays are float64."""
    import torch
    from transformers import Glm5NextForConditionalGeneration
    from transformers.utils import logging

    logging.set_verbosity_error()
    if exact:
        model = Glm5NextForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float64, attn_implementation="sdpa",
                                                                 experts_implementation="eager")
    else:
        model = Glm5NextForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa")
    selections: dict[int, list[set[int]]] = {}
    hooks = []
    for il, layer in enumerate(model.model.language_model.layers):
        indexer = getattr(layer.self_attn, "indexer", None)
        if indexer is not None:
            def keep(_mod, _args, out, il=il):
                selections[il] = [set(int(j) for j in row if j >= 0) for row in out[0].tolist()]
            hooks.append(indexer.register_forward_hook(keep))
    hidden = []
    hooks.append(model.model.language_model.norm.register_forward_hook(lambda _m, _a, out: hidden.append(out[0])))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].numpy()
    for h in hooks:
        h.remove()
    return logits, hidden[0].numpy(), selections
