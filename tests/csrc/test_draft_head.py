"""The C++ NextN draft head against tests/reference (PyTorch, docs/model.md): drafted tokens, the logits of every
step and the positions every step attends, with index sharing on and off, at a context past index_topk."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import random_tokens
from reference.nextn import NextNHead

# f32 weights on both sides; what remains is fp32 summation order through the trunk and the head.
F32_BOUND = 1e-4


@pytest.fixture(scope="module", params=["tiny", "kpool8", "notail"])
def case(request, checkpoints):
    from transformers import Glm5NextForConditionalGeneration
    from transformers.utils import logging

    logging.set_verbosity_error()
    ckpt = checkpoints.make(f"draft-{request.param}", request.param, dtype="f32")
    trunk = Glm5NextForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa")
    return checkpoints.convert(ckpt, outtype="f32"), trunk, NextNHead(trunk, ckpt)


def reference_draft(trunk, head, tokens, n_steps, share):
    hidden = []
    hook = trunk.model.language_model.norm.register_forward_hook(lambda _m, _a, out: hidden.append(out[0]))
    with torch.no_grad():
        trunk(input_ids=torch.tensor([tokens[:-1]]))
    hook.remove()
    return head.draft(hidden[0], tokens, n_steps, share)


@pytest.mark.parametrize("share", [True, False])
def test_draft_matches_reference(case, share):
    from glm5next_runtime import Model

    path, trunk, head = case
    topk = trunk.config.text_config.index_topk
    tokens = random_tokens(3 * topk + 11, seed=2)
    want = reference_draft(trunk, head, tokens, 4, share)
    # f32 caches: the reference is fp32 math (the f16 default's rounding is tests/csrc/test_trunk.py's subject)
    got = Model(path, n_ctx=512, n_threads=2, cache_type_k="f32").draft(tokens, 4, share=share)
    assert np.abs(got.logits - want.logits.numpy()).max() <= F32_BOUND
    assert got.tokens == want.tokens
    assert got.selected == want.selected
    assert len(got.selected[0]) < len(tokens) - 1  # sparse: step 0 does not attend every row


def test_sharing_changes_later_steps_only(case):
    from glm5next_runtime import Model
    from glm5next_runtime.draft import draft

    path, trunk, _ = case
    m = Model(path, n_ctx=512, n_threads=2)
    tokens = random_tokens(3 * trunk.config.text_config.index_topk + 11, seed=3)
    on, off = draft(m, tokens, 3, share=True), draft(m, tokens, 3, share=False)
    assert np.array_equal(on.logits[0], off.logits[0])
    assert on.selected[1] == on.selected[0] and off.selected[1] != off.selected[0]
    assert not np.array_equal(on.logits[1], off.logits[1])


def test_default_follows_the_file(checkpoints):
    from glm5next_runtime import Model
    from glm5next_runtime.draft import draft

    ckpt = checkpoints.make("draft-tiny", "tiny", dtype="f32")  # index_share_for_mtp_iteration: true
    tokens = random_tokens(60, seed=4)
    on = Model(checkpoints.convert(ckpt, outtype="f32"), n_ctx=256, n_threads=2)
    off = Model(checkpoints.convert(ckpt, outtype="f32"), n_ctx=256, n_threads=2,
                override_kv=["glm5next.index_share_for_mtp_iteration=bool:false"])
    assert np.array_equal(draft(on, tokens, 3).logits, draft(on, tokens, 3, share=True).logits)
    assert np.array_equal(draft(off, tokens, 3).logits, draft(off, tokens, 3, share=False).logits)


def test_an_overridden_top_k_drafts_as_the_reference_with_that_top_k(checkpoints):
    """--override-kv glm5next.attention.indexer.top_k reaches the draft head: its step 0 selects that many keys and
    later steps share them (index sharing), as the reference built with that index_topk."""
    from transformers import AutoConfig, Glm5NextForConditionalGeneration

    from glm5next_runtime import Model

    ckpt = checkpoints.make("draft-tiny", "tiny", dtype="f32")
    config = AutoConfig.from_pretrained(ckpt)
    top_k = config.text_config.index_topk // 2
    config.text_config.index_topk = top_k
    trunk = Glm5NextForConditionalGeneration.from_pretrained(ckpt, config=config, dtype=torch.float32,
                                                             attn_implementation="sdpa")
    tokens = random_tokens(6 * top_k + 11, seed=5)
    want = reference_draft(trunk, NextNHead(trunk, ckpt), tokens, 3, True)
    got = Model(checkpoints.convert(ckpt, outtype="f32"), n_ctx=512, n_threads=2, cache_type_k="f32",
                override_kv=[f"glm5next.attention.indexer.top_k=int:{top_k}"]).draft(tokens, 3, share=True)
    assert np.abs(got.logits - want.logits.numpy()).max() <= F32_BOUND
    assert got.tokens == want.tokens and got.selected == want.selected
    kpool = config.text_config.index_kpool
    assert top_k < len(got.selected[0]) <= top_k + kpool - 1  # the top-k keys and the tail (kpool_select_tail)
    assert got.selected[1] == got.selected[2] == got.selected[0]
