"""scripts/make_checkpoint.py: every variant is a checkpoint transformers 5.23 loads completely (the trunk),
in the real hub layout, deterministic by seed."""
from __future__ import annotations

import json

import pytest
import torch

from make_checkpoint import PRESETS


def load_report(ckpt, **kwargs):
    from transformers import Glm5NextForConditionalGeneration
    from transformers.utils import logging

    logging.set_verbosity_error()
    model, info = Glm5NextForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                                   output_loading_info=True, **kwargs)
    return model, info


VARIANTS = [(p, {}) for p in PRESETS if p not in ("many-experts", "bench")] + [
    ("tiny", {"dtype": "f32"}), ("tiny", {"shards": 3}), ("tiny", {"nextn": False}),
    ("tiny", {"flat_config": True, "index_share_at": "top"}), ("tiny", {"index_share_at": None}),
]


@pytest.mark.parametrize("preset, fields", VARIANTS, ids=[f"{p}-{'-'.join(map(str, f.values()))}" for p, f in VARIANTS])
def test_transformers_loads_every_trunk_tensor(checkpoints, preset, fields):
    ckpt = checkpoints.make(f"gen-{preset}-{sorted(fields.items())}", preset, **fields)
    model, info = load_report(ckpt)
    missing = [k for k in info["missing_keys"] if not k.startswith("model.visual.")]
    assert not missing
    unexpected = {k.split(".layers.")[1].split(".")[0] for k in info["unexpected_keys"]}
    n = model.config.text_config.num_hidden_layers
    assert unexpected <= {str(n)}  # only the NextN layer, which transformers does not model
    assert (str(n) in unexpected) == fields.get("nextn", True)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(range(40))])).logits
    assert torch.isfinite(logits).all()


def test_hub_layout_and_determinism(checkpoints, tmp_path):
    from make_checkpoint import make_checkpoint

    a = checkpoints.make("gen-tiny-[]", "tiny")
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["architectures"] == ["Glm5NextForConditionalGeneration"]
    text = cfg["text_config"]
    for key in ("linear_attn_config", "first_k_dense_replace", "mla_use_nope", "index_kpool",
                "index_kpool_always_select_tail", "indexer_types", "hc_mult", "num_nextn_predict_layers",
                "index_share_for_mtp_iteration"):
        assert key in text, key
    assert "index_share_for_mtp_iteration" not in cfg  # text_config only, as on the hub
    b = make_checkpoint(tmp_path / "again", "tiny")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    c = make_checkpoint(tmp_path / "other-seed", "tiny", seed=1)
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_chat_template_renders_glm_prompt(checkpoints):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(checkpoints.make("gen-tiny-[]", "tiny"))
    text = tok.apply_chat_template([{"role": "user", "content": "def f(x):"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "[gMASK]<sop><|user|>\ndef f(x):<|assistant|>\n<think>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[:2] == [tok.convert_tokens_to_ids("[gMASK]"), tok.convert_tokens_to_ids("<sop>")]
    assert tok.decode(tok("import os\n")["input_ids"]) == "import os\n"
