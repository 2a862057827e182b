"""PyTorch reference of the GLM-5.3-Flash NextN (MTP) draft head, exactly as docs/model.md fixes it
("NextN draft head" and "index_share_for_mtp_iteration"). transformers 5.23 has no implementation, so this is
the oracle for the C++ draft head. It reuses transformers' Glm5Next modules (RMSNorm, the DSA attention, the
kpool indexer, the MoE) and recomputes every row from scratch at each step (no cache), which is slow and
obviously right.

One draft row at position p pairs the trunk's post-norm hidden h_p with the NEXT token x_{p+1}:
    u = eh_proj [RMSNorm_e(E[x_{p+1}]); RMSNorm_h(h_p)]
    a = u + DSA(RMSNorm_in(u));  o = a + MoE(RMSNorm_post(a));  z = RMSNorm_shared(o);  logits = lm_head z
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from transformers.models.glm5_next.modeling_glm5_next import (
    Glm5NextTextAttention,
    Glm5NextTextIndexer,
    Glm5NextTextMoE,
    Glm5NextTextRMSNorm,
)


@dataclass
class DraftSteps:
    tokens: list[int]                # drafted ids, one per step (greedy)
    logits: torch.Tensor             # float32 [n_steps, n_vocab]
    selected: list[set[int]]         # per step: key positions the step attended


class NextNHead(nn.Module):
    """The NextN layer of a Glm5NextForConditionalGeneration checkpoint, using the trunk's embedding and head."""

    def __init__(self, trunk, ckpt_dir: str | Path):
        super().__init__()
        cfg = copy.deepcopy(trunk.config.text_config)
        n = cfg.num_hidden_layers
        # The attention module attends a selection it is given ("shared" has no indexer of its own); the head's
        # own indexer is a separate module, so step k >= 1 can reuse step 0's selection.
        cfg.indexer_types = list(cfg.indexer_types) + ["shared"]
        cfg.layer_types = list(cfg.layer_types) + ["indexed_attention"]
        cfg._attn_implementation = "sdpa"  # an empty selection gives a zero output (docs/model.md, Indexer)
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.embed, self.lm_head = trunk.model.language_model.embed_tokens, trunk.lm_head
        self.enorm, self.hnorm = Glm5NextTextRMSNorm(h, eps), Glm5NextTextRMSNorm(h, eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.input_layernorm = Glm5NextTextRMSNorm(h, eps)
        self.self_attn = Glm5NextTextAttention(cfg, n)
        self.indexer = Glm5NextTextIndexer(cfg, n)
        self.post_attention_layernorm = Glm5NextTextRMSNorm(h, eps)
        self.mlp = Glm5NextTextMoE(cfg)
        self.shared_head_norm = Glm5NextTextRMSNorm(h, eps)
        self.n_experts = cfg.n_routed_experts
        self._load(Path(ckpt_dir), n)
        self.float().eval()

    def _load(self, ckpt_dir: Path, n: int) -> None:
        prefix = f"model.language_model.layers.{n}."
        raw = {}
        for f in sorted(ckpt_dir.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as st:
                raw |= {k[len(prefix):]: st.get_tensor(k).float() for k in st.keys() if k.startswith(prefix)}
        if not raw:
            raise ValueError(f"{ckpt_dir}: no NextN layer (layer {n}) in the weights")
        state = {"shared_head_norm.weight": raw.pop("shared_head.norm.weight")}
        experts = {}
        for k, v in raw.items():
            if (m := re.match(r"mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight", k)):
                experts[(int(m[1]), m[2])] = v
            elif k.startswith("self_attn.indexer."):
                state[k.replace("self_attn.indexer.", "indexer.")] = v
            else:
                state[k] = v
        e = range(self.n_experts)
        state["mlp.experts.gate_up_proj"] = torch.stack([torch.cat([experts[(i, "gate")], experts[(i, "up")]]) for i in e])
        state["mlp.experts.down_proj"] = torch.stack([experts[(i, "down")] for i in e])
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith(("embed.", "lm_head."))]
        if missing or unexpected:
            raise ValueError(f"NextN weights do not fit: missing {missing}, unexpected {unexpected}")

    @torch.no_grad()
    def rows(self, hidden: torch.Tensor, next_tokens: torch.Tensor, last_selection: torch.Tensor | None = None):
        """Draft rows at positions 0..R-1 from (hidden [R, H], next_tokens [R]); all rows recomputed.

        Every row attends its own indexer's selection, except the last one when `last_selection` (int [W],
        -1 padded) is given. Returns (z [R, H], logits [R, n_vocab], selection of the last row [W])."""
        e = self.enorm(self.embed(next_tokens))
        u = self.eh_proj(torch.cat([e, self.hnorm(hidden)], dim=-1))[None]
        x = self.input_layernorm(u)
        mask = torch.ones(1, u.shape[1], dtype=torch.bool)
        q_resid = self.self_attn.q_a_layernorm(self.self_attn.q_a_proj(x))
        sel = self.indexer(x, q_resid, mask, None)                 # [1, R, W]
        if last_selection is not None:
            sel[0, -1] = -1
            sel[0, -1, : len(last_selection)] = last_selection
        a = u + self.self_attn(x, mask, None, prev_topk_indices=sel)[0]
        o = a + self.mlp(self.post_attention_layernorm(a))
        z = self.shared_head_norm(o)[0]
        return z, self.lm_head(z), sel[0, -1].clone()

    @torch.no_grad()
    def draft(self, hidden: torch.Tensor, tokens: list[int], n_steps: int, share: bool) -> DraftSteps:
        """`tokens`: a prompt of T tokens plus the token the trunk emits next; `hidden`: the trunk's post-norm
        hidden states of the T prompt rows [T, H]. The head's rows are (h_p, x_{p+1}) for p < T; step 0 is the row
        at T-1; step k >= 1 is the row (z_{k-1}, d_k) at T-1+k, chained greedily. With `share`, steps >= 1 attend
        exactly step 0's selection S(p0); without, every step runs the indexer over all rows up to its own."""
        hs, xs = list(hidden.float()), list(tokens[1:])
        out = DraftSteps([], torch.empty(0), [])
        logits_rows, saved = [], None
        for k in range(n_steps):
            z, logits, sel = self.rows(torch.stack(hs), torch.tensor(xs), saved if (share and k > 0) else None)
            if k == 0:
                saved = sel
            d = int(torch.argmax(logits[-1]))
            out.tokens.append(d)
            logits_rows.append(logits[-1])
            out.selected.append({int(j) for j in sel if j >= 0})
            hs.append(z[-1])
            xs.append(d)
        out.logits = torch.stack(logits_rows)
        return out
