"""scripts/train/ (the training modules) against transformers 5.23 and tests/reference/nextn.py on the same random
f32 weights: trunk logits and every full indexer's selection, the NextN head's rows (share off) and its
index-shared later step, the chunked KDA against the recurrence, and where the losses' gradients go."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import hf_trunk, random_tokens

# f32 on both sides; what remains is summation order (observed below 3e-5)
F32_BOUND = 1e-4


def _load(ckpt):
    from train import hub
    return hub.load(ckpt).eval()


def _selections(model, out) -> dict[int, list[set[int]]]:
    """Trunk layer -> per query row the set of key rows its full indexer selected."""
    dsa_layers = [i for i, t in enumerate(model.cfg["layer_types"]) if t != "linear_attention"]
    return {i: [set(torch.nonzero(row).flatten().tolist()) for row in rec.mask[0]]
            for i, rec in zip(dsa_layers, out.dsa) if model.cfg["indexer_types"][i] == "full"}


@pytest.mark.parametrize("preset", ["tiny", "shared", "kpool8", "notail", "groups", "dense-sparse"])
def test_trunk_logits_and_selections_match_transformers(checkpoints, preset):
    ckpt = checkpoints.make(f"trunk-{preset}", preset, dtype="f32")
    model = _load(ckpt)
    tokens = random_tokens(4 * model.cfg["index_topk"] + 7, seed=1)  # sparse: late rows drop most keys
    want_logits, want_hidden, want_sel = hf_trunk(ckpt, tokens)
    with torch.no_grad():
        out = model.trunk(torch.tensor([tokens]))
        logits = model.lm_head(out.hidden)[0].numpy()
    assert np.abs(logits - want_logits).max() <= F32_BOUND
    assert np.abs(out.hidden[0].numpy() - want_hidden).max() <= F32_BOUND
    got_sel = _selections(model, out)
    assert got_sel == want_sel
    assert len(got_sel[min(got_sel)][-1]) < len(tokens) - 1


def test_chunked_kda_matches_the_recurrence():
    from transformers.models.glm5_next.modeling_glm5_next import recurrent_kimi_delta_attention

    from train.kda import chunk_kda, l2norm

    gen = torch.Generator().manual_seed(0)
    b, t, h, d = 2, 77, 3, 16  # not a multiple of the chunk: the padded tail must change nothing
    q, k, v = (torch.randn(b, t, h, d, generator=gen) for _ in range(3))
    beta = torch.sigmoid(torch.randn(b, t, h, generator=gen))
    for g in (-5 * torch.sigmoid(2 * torch.randn(b, t, h, d, generator=gen)), torch.full((b, t, h, d), -5.0)):
        want, _ = recurrent_kimi_delta_attention(q, k, v, g, beta, None, False, use_qk_l2norm_in_kernel=True)
        got = chunk_kda(l2norm(q) * d ** -0.5, l2norm(k), v, g, beta)
        assert (got - want).abs().max() <= 1e-5


@pytest.fixture(scope="module", params=["tiny", "kpool8", "notail"])
def head_case(request, checkpoints):
    from transformers import Glm5NextForConditionalGeneration
    from transformers.utils import logging

    from reference.nextn import NextNHead

    logging.set_verbosity_error()
    ckpt = checkpoints.make(f"draft-{request.param}", request.param, dtype="f32")
    trunk = Glm5NextForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa")
    model = _load(ckpt)
    tokens = torch.tensor(random_tokens(3 * model.cfg["index_topk"] + 11, seed=2))
    with torch.no_grad():
        hidden = model.trunk(tokens[None]).hidden
    return model, NextNHead(trunk, ckpt), tokens, hidden


def test_nextn_rows_match_reference(head_case):
    model, ref, tokens, hidden = head_case
    with torch.no_grad():
        z, rec = model.draft(hidden[:, :-1], tokens[None, 1:])
        _, want, _ = ref.rows(hidden[0, :-1], tokens[1:])
    assert (model.lm_head(z)[0] - want).abs().max() <= F32_BOUND
    assert rec.mask[0, -1].sum() < len(tokens) - 1  # the head's own indexer is sparse here


def test_index_shared_step_matches_reference(head_case):
    """Step 1 at row p: (z_0[p], x_{p+2}) attending step 0's rows under S(p), never the new row."""
    from train.objective import first_rows

    model, ref, tokens, hidden = head_case
    rows = len(tokens) - 2
    with torch.no_grad():
        z0, rec = model.draft(hidden[:, :rows], tokens[None, 1: rows + 1])
        z1, _ = model.draft(z0, tokens[None, 2: rows + 2], first_rows(rec, rows))
        got = model.lm_head(z1)[0]
        for p in (2, rows // 2, rows - 1):
            selection = torch.nonzero(rec.mask[0, p]).flatten()
            _, want, _ = ref.rows(torch.cat([hidden[0, : p + 1], z0[0, p: p + 1]]), tokens[1: p + 3],
                                  last_selection=selection)
            assert (got[p] - want[-1]).abs().max() <= F32_BOUND


def test_indexer_loss_trains_only_the_indexers(checkpoints):
    from train.objective import losses

    model = _load(checkpoints.make("trunk-tiny", "tiny", dtype="f32")).train()
    out = losses(model, torch.tensor([random_tokens(80, seed=3)]), mtp_steps=2)
    assert out.indexer > 0 and len(out.draft) == 2
    out.indexer.backward(retain_graph=True)
    touched = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert touched and all(".indexer." in n for n in touched)
    model.zero_grad()
    out.total.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_moe_balance_moves_bias_against_load():
    from train.moe import MoE

    moe = MoE(8, 4, 4, 1, 1, 7.0, 1, 1, 1.0, True).train()
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.weight[0] = 1.0  # expert 0 wins every token with positive features
        moe(torch.ones(1, 10, 8))
    moe.balance(0.01)
    bias = moe.gate.e_score_correction_bias
    assert bias[0] < 0 and (bias[1:] > 0).all() and moe.load.sum() == 0
