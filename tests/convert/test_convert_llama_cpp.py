"""Conformance with upstream: a `--arch glm5-next` file loads in llama-cpp-python 0.3.36 and its logits match
transformers 5.23's on the same checkpoint, over a sequence several times longer than index_topk (so the
indexer's sparse selection decides what each row attends)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import hf_logits, llama_cpp_logits, random_tokens

N_TOKENS = 100  # >= 3 x index_topk for every variant below; rows past index_topk + kpool drop keys

# Observed on these checkpoints: max |diff| 1e-5 .. 5e-5 (f32 weights and caches on both sides).
F32_BOUND = 1e-4


@pytest.mark.parametrize("preset", ["tiny", "shared", "kpool8", "groups", "dense-sparse"])
def test_llama_cpp_matches_transformers(checkpoints, preset):
    ckpt = checkpoints.make(f"conf-{preset}", preset, dtype="f32")
    path = checkpoints.convert(ckpt, outtype="f32", arch="glm5-next")
    tokens = random_tokens(N_TOKENS)
    got, want = llama_cpp_logits(path, tokens), hf_logits(ckpt, tokens)
    assert got.shape == want.shape
    diff = np.abs(got - want).max()
    assert diff <= F32_BOUND, f"max abs diff {diff}"


def test_llama_cpp_loads_quantized_file(checkpoints):
    """A q8_0 file loads upstream and its logits follow the f32 file's.

    Random small models are chaotic: near-tied expert and pool scores flip under any perturbation (even f16
    weights move logits by up to 0.4 here), so the bound is on the mean per-row correlation with the f32
    logits (observed 0.9999 for f16, 0.967 for q8_0); wrongly laid-out blocks give ~0."""
    ckpt = checkpoints.make("conf-tiny", "tiny", dtype="f32")
    tokens = random_tokens(N_TOKENS)
    f32 = llama_cpp_logits(checkpoints.convert(ckpt, outtype="f32", arch="glm5-next"), tokens)
    q8 = llama_cpp_logits(checkpoints.convert(ckpt, outtype="q8_0", arch="glm5-next"), tokens)
    assert np.isfinite(q8).all()
    corr = np.mean([np.corrcoef(a, b)[0, 1] for a, b in zip(f32, q8)])
    assert corr > 0.9, corr


@pytest.mark.xfail(strict=True, reason="llama.cpp 0.3.36 returns NaN when index_kpool_always_select_tail is "
                   "false: rows t < kpool - 1 select no key, and its softmax over an empty set is NaN, where "
                   "transformers (and docs/model.md, Indexer) give a zero attention output")
def test_llama_cpp_without_tail_matches_transformers(checkpoints):
    ckpt = checkpoints.make("conf-notail", "notail", dtype="f32")
    tokens = random_tokens(N_TOKENS)
    got = llama_cpp_logits(checkpoints.convert(ckpt, outtype="f32", arch="glm5-next"), tokens)
    assert np.abs(got - hf_logits(ckpt, tokens)).max() <= F32_BOUND
