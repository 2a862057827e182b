"""FP8 (e4m3 + 128x128 block scales) checkpoints: dequantized before any cast, so a checkpoint converted from
FP8 and its BF16 sibling holding the same numbers give the same GGUF and the same logits."""
from __future__ import annotations

import json

import numpy as np
import torch

from conftest import hf_logits, llama_cpp_logits, random_tokens
from test_convert_roundtrip import gguf_tensors


def test_fp8_checkpoint_has_block_scales(checkpoints):
    ckpt = checkpoints.make("fp8", dtype="fp8")
    assert json.loads((ckpt / "config.json").read_text())["quantization_config"]["weight_block_size"] == [128, 128]
    from safetensors import safe_open
    with safe_open(str(ckpt / "model.safetensors"), framework="pt") as st:
        name = "model.language_model.layers.3.mlp.experts.0.up_proj.weight"
        assert st.get_tensor(name).dtype == torch.float8_e4m3fn
        assert st.get_tensor(name + "_scale_inv").shape == (1, 1)


def test_fp8_and_bf16_siblings_convert_to_the_same_file(checkpoints):
    fp8 = checkpoints.make("fp8", dtype="fp8")
    bf16 = checkpoints.make("fp8-grid", dtype="fp8-grid")  # same seed: same numbers, stored dequantized
    a = gguf_tensors(checkpoints.convert(fp8, outtype="f32"))
    b = gguf_tensors(checkpoints.convert(bf16, outtype="f32"))
    assert list(a) == list(b)
    for name in a:
        assert np.array_equal(a[name][1], b[name][1]), name
    # the scales matter: without them the expert weights would be the raw e4m3 codes
    assert not np.array_equal(a["blk.3.ffn_up_exps.weight"][1], np.round(a["blk.3.ffn_up_exps.weight"][1]))


def test_fp8_logits_agree_across_runtimes(checkpoints):
    """transformers on the FP8 checkpoint (dequantized on load) == transformers on the BF16 sibling ==
    llama-cpp-python on the GGUF converted from FP8."""
    from transformers import FineGrainedFP8Config, Glm5NextForConditionalGeneration

    fp8, bf16 = checkpoints.make("fp8", dtype="fp8"), checkpoints.make("fp8-grid", dtype="fp8-grid")
    tokens = random_tokens(64)
    model = Glm5NextForConditionalGeneration.from_pretrained(
        fp8, dtype=torch.float32, quantization_config=FineGrainedFP8Config(dequantize=True)).float()
    with torch.no_grad():
        hf_fp8 = model(input_ids=torch.tensor([tokens])).logits[0].numpy()
    hf_bf16 = hf_logits(bf16, tokens)
    assert np.array_equal(hf_fp8, hf_bf16)
    ours = llama_cpp_logits(checkpoints.convert(fp8, tag="-dash", outtype="f32", arch="glm5-next"), tokens)
    assert np.abs(ours - hf_bf16).max() <= 1e-4
