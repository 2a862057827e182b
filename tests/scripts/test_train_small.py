"""scripts/train_small.py end to end at the tiny size: a few steps, then the saved checkpoint loads in
transformers, converts with glm5next_convert, and runs in glm5next_runtime with the numbers of the training modules
(trunk logits, selections, the NextN head's draft steps) and generates text."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import random_tokens

F32_BOUND = 1e-4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    import train_small

    out = tmp_path_factory.mktemp("train") / "glm5next-tiny"
    assert train_small.main(["--out", str(out), "--size", "tiny", "--steps", "4", "--seq-len", "64", "--batch", "2",
                             "--max-files", "30", "--eval-every", "2", "--eval-windows", "2", "--mtp-steps", "2"]) == 0
    return out


def test_writes_the_hub_layout(trained):
    from transformers import AutoTokenizer, Glm5NextForConditionalGeneration
    from transformers.utils import logging

    logging.set_verbosity_error()
    cfg = json.loads((trained / "config.json").read_text())
    assert cfg["architectures"] == ["Glm5NextForConditionalGeneration"]
    assert cfg["text_config"]["index_share_for_mtp_iteration"] is True
    assert cfg["text_config"]["num_nextn_predict_layers"] == 1
    notes = json.loads((trained / "training.json").read_text())
    assert notes["steps"] == 4 and len(notes["history"]) == 2
    assert np.isfinite([notes["heldout"]["lm"], *notes["heldout"]["draft"]]).all()
    assert not list(trained.parent.glob(".*tmp*"))  # written aside, then renamed
    model, info = Glm5NextForConditionalGeneration.from_pretrained(trained, dtype=torch.float32,
                                                                   output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    n = cfg["text_config"]["num_hidden_layers"]
    assert {k.split(".layers.")[1].split(".")[0] for k in info["unexpected_keys"]} == {str(n)}  # the NextN layer
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.tensor([list(range(50))])).logits).all()
    tok = AutoTokenizer.from_pretrained(trained)
    assert tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True) \
        == "[gMASK]<sop><|user|>\nx<|assistant|>\n<think>"
    assert tok.decode(tok("import os\n")["input_ids"]) == "import os\n"


def test_runtime_computes_what_training_computed(trained, tmp_path):
    """f32 conversion of the bf16 weights: the C++ engine and the training modules compute the same numbers (both
    break exact indexer ties toward the lower pool, which transformers' topk does not promise)."""
    from glm5next_convert import convert
    from glm5next_runtime import Model

    from train import hub
    from train.objective import first_rows

    model = hub.load(trained).eval()
    runtime = Model(convert(trained, tmp_path / "f32.gguf", outtype="f32", progress=False, log=lambda m: None),
                    n_ctx=256, n_threads=2)
    tokens = random_tokens(100, vocab=380, seed=5)
    ids = torch.tensor([tokens])
    with torch.no_grad():
        out = model.trunk(ids)
        logits = model.lm_head(out.hidden)[0].numpy()
        assert np.abs(runtime.eval(tokens, logits_all=True) - logits).max() <= F32_BOUND
        il = runtime.dsa_layers[0]
        assert runtime.selected_positions(il) == [set(torch.nonzero(r).flatten().tolist()) for r in out.dsa[0].mask[0]]
        # draft steps after the prompt tokens[:-1]: step 0 is row (h_98, x_99); step 1 row (z_0, d_1) under S(98)
        got = runtime.draft(tokens, 2, share=True)
        z0, rec = model.draft(out.hidden[:, :-1], ids[:, 1:])
        step0 = model.lm_head(z0[0, -1])
        assert np.abs(got.logits[0] - step0.numpy()).max() <= F32_BOUND
        next_ids = torch.cat([ids[:, 2:], torch.tensor([[int(step0.argmax())]])], dim=1)
        z1, _ = model.draft(z0, next_ids, first_rows(rec, z0.shape[1]))
        assert np.abs(got.logits[1] - model.lm_head(z1[0, -1]).numpy()).max() <= F32_BOUND


def test_runtime_generates_from_the_bf16_file(trained, tmp_path):
    from glm5next_convert import convert
    from glm5next_runtime import Model

    runtime = Model(convert(trained, tmp_path / "auto.gguf", progress=False, log=lambda m: None), n_ctx=128,
                    n_threads=2, draft_adaptive=False)  # drafts every round (adaptive lengths open with plain rounds)
    result = runtime.generate("def f(x):\n", max_tokens=6, temperature=0)
    assert len(result.tokens) >= 1 and result.metrics["n_drafts"] >= 1
