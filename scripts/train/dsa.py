"""DSA: sparse MLA (NoPE) whose key set per query row is chosen by the kpool indexer.

Training turns the selection into a boolean [B, T, T] attention mask over the whole sequence (computed without
gradient: top-k is not differentiable). The indexer is trained on its own, as in DeepSeek-V3.2: its inputs are
detached from the trunk, and its loss is KL(p || softmax(index scores)) per query row, where p is the main
attention's dense causal distribution (mean over heads), summed over each candidate pool's rows and renormalized
over the candidate pools (DeepSeek-V3.2's dense warm-up target, over pools instead of single keys).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .norms import RMSNorm


class Indexer(nn.Module):
    """Scores complete kpool pools for every query row. Hub names: indexer.wq_b, wk, k_norm (LayerNorm with bias),
    weights_proj, index_kpool_compress_gate [head_dim, hidden], index_kpool_compress_ape [kpool, head_dim]."""

    def __init__(self, hidden: int, q_lora_rank: int, n_heads: int, head_dim: int, kpool: int):
        super().__init__()
        self.wq_b = nn.Linear(q_lora_rank, n_heads * head_dim, bias=False)
        self.wk = nn.Linear(hidden, head_dim, bias=False)
        self.k_norm = nn.LayerNorm(head_dim, eps=1e-6)
        self.weights_proj = nn.Linear(hidden, n_heads, bias=False)
        self.index_kpool_compress_gate = nn.Parameter(torch.zeros(head_dim, hidden))
        self.index_kpool_compress_ape = nn.Parameter(torch.zeros(kpool, head_dim))
        self.n_heads, self.head_dim, self.kpool = n_heads, head_dim, kpool

    def forward(self, x: torch.Tensor, q_resid: torch.Tensor) -> torch.Tensor:
        """x [B, T, hidden], q_resid [B, T, q_lora_rank] -> scores [B, T, T // kpool] float32 (pool m holds rows
        m*kpool .. m*kpool + kpool-1): sum_h w_h relu(q_h . pooled_key_m / sqrt(head_dim))."""
        bsz, seq, _ = x.shape
        pools = seq // self.kpool
        q = self.wq_b(q_resid).view(bsz, seq, self.n_heads, self.head_dim)
        k = self.k_norm(self.wk(x))[:, : pools * self.kpool].view(bsz, pools, self.kpool, -1)
        gate = F.linear(x, self.index_kpool_compress_gate)[:, : pools * self.kpool].view(bsz, pools, self.kpool, -1)
        pooled = (torch.softmax(gate + self.index_kpool_compress_ape, dim=2) * k).sum(2)      # [B, P, head_dim]
        scores = F.relu((q @ pooled.transpose(-1, -2).unsqueeze(1)) * self.head_dim ** -0.5)   # [B, T, H, P]
        weights = self.weights_proj(x) * self.n_heads ** -0.5
        return (weights.unsqueeze(-2) @ scores).squeeze(-2)


def candidates(seq: int, kpool: int, device=None) -> torch.Tensor:
    """[T, T // kpool] bool: pool m is a candidate for row t when its last row m*kpool + kpool-1 is <= t."""
    ends = torch.arange(seq // kpool, device=device) * kpool + kpool - 1
    return ends <= torch.arange(seq, device=device)[:, None]


@torch.no_grad()
def select(scores: torch.Tensor, kpool: int, topk: int, tail: bool) -> torch.Tensor:
    """scores [B, T, P] -> mask [B, T, T] bool of the rows each query attends: the top min(#candidates,
    topk // kpool) candidate pools (exact ties go to the lower pool index: a stable sort), plus with `tail` the
    rows of the incomplete pool ending at t."""
    bsz, seq, pools = scores.shape
    cand = candidates(seq, kpool, scores.device)
    order = scores.masked_fill(~cand, float("-inf")).sort(dim=-1, descending=True, stable=True).indices
    chosen = torch.zeros_like(cand).expand(bsz, -1, -1).scatter(-1, order[..., : min(topk // kpool, pools)], True)
    mask = F.pad((chosen & cand).repeat_interleave(kpool, dim=-1), (0, seq - pools * kpool))
    if tail:
        t = torch.arange(seq, device=scores.device)
        mask = mask | ((t <= t[:, None]) & (t >= (t[:, None] + 1) // kpool * kpool))
    return mask


def indexer_kl(scores: torch.Tensor, q: torch.Tensor, k: torch.Tensor, kpool: int) -> torch.Tensor:
    """The indexer's loss (module docstring). scores [B, T, P] (with gradient); q, k [B, H, T, D] the main
    attention's heads (detached). Returns the KL averaged over the rows that have a candidate pool."""
    bsz, seq, pools = scores.shape
    cand = candidates(seq, kpool, scores.device)
    with torch.no_grad():
        causal = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
        target = torch.empty_like(scores)
        for b in range(bsz):  # one sequence at a time: the dense [H, T, T] probabilities are the big tensor
            logits = (q[b] @ k[b].transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(~causal, -torch.inf)
            att = torch.softmax(logits, dim=-1)
            target[b] = att.mean(0)[:, : pools * kpool].view(seq, pools, kpool).sum(-1)
        target = target * cand
        target = target / target.sum(-1, keepdim=True).clamp_min(1e-30)
    log_q = torch.log_softmax(scores.masked_fill(~cand, torch.finfo(scores.dtype).min), dim=-1)
    rows = cand.any(-1)
    return F.kl_div(log_q, target, reduction="none").sum(-1)[:, rows].mean()


@dataclass
class DSAOut:
    out: torch.Tensor             # [B, T, hidden]
    mask: torch.Tensor            # [B, T, T] bool: the rows each query attended
    latent: torch.Tensor          # [B, T, kv_lora_rank]: what the cache stores (keys and values of later queries)
    aux: torch.Tensor | None      # indexer loss (training, full layers only)


class DSA(nn.Module):
    """The indexed_attention block (NoPE MLA). Hub names: self_attn.q_a_proj, q_a_layernorm, q_b_proj,
    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj and, for a "full" layer, self_attn.indexer.*."""

    def __init__(self, cfg: dict, with_indexer: bool):
        super().__init__()
        hidden, heads, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["rms_norm_eps"]
        self.heads, self.dq, self.dv = heads, cfg["qk_nope_head_dim"], cfg["v_head_dim"]
        self.kpool, self.topk, self.tail = cfg["index_kpool"], cfg["index_topk"], cfg["index_kpool_always_select_tail"]
        self.q_a_proj = nn.Linear(hidden, cfg["q_lora_rank"], bias=False)
        self.q_a_layernorm = RMSNorm(cfg["q_lora_rank"], eps)
        self.q_b_proj = nn.Linear(cfg["q_lora_rank"], heads * self.dq, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, cfg["kv_lora_rank"], bias=False)
        self.kv_a_layernorm = RMSNorm(cfg["kv_lora_rank"], eps)
        self.kv_b_proj = nn.Linear(cfg["kv_lora_rank"], heads * (self.dq + self.dv), bias=False)
        self.o_proj = nn.Linear(heads * self.dv, hidden, bias=False)
        self.indexer = (Indexer(hidden, cfg["q_lora_rank"], cfg["index_n_heads"], cfg["index_head_dim"], self.kpool)
                        if with_indexer else None)

    def forward(self, x: torch.Tensor, shared_mask: torch.Tensor | None = None) -> DSAOut:
        """x [B, T, hidden]. A layer without an indexer attends `shared_mask` (the previous full layer's)."""
        q_resid = self.q_a_layernorm(self.q_a_proj(x))
        latent = self.kv_a_layernorm(self.kv_a_proj_with_mqa(x))
        q, (k, v) = self._queries(q_resid), self._keys_values(latent)
        aux = None
        if self.indexer is None:
            mask = shared_mask
        else:
            scores = self.indexer(x.detach(), q_resid.detach())
            mask = select(scores.detach(), self.kpool, self.topk, self.tail)
            if self.training:
                aux = indexer_kl(scores, q.detach(), k.detach(), self.kpool)
        return DSAOut(self._attend(q, k, v, mask), mask, latent, aux)

    def attend(self, x: torch.Tensor, latent: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Queries from x [B, T, hidden] over keys/values of another pass's `latent` [B, T, kv_lora_rank] under
        `mask` [B, T, T] (the NextN head's later steps, which reuse step 0's rows and selection)."""
        q = self._queries(self.q_a_layernorm(self.q_a_proj(x)))
        return self._attend(q, *self._keys_values(latent), mask)

    def _queries(self, q_resid: torch.Tensor) -> torch.Tensor:
        return self.q_b_proj(q_resid).unflatten(-1, (self.heads, self.dq)).transpose(1, 2)

    def _keys_values(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self.kv_b_proj(latent).unflatten(-1, (self.heads, self.dq + self.dv)).transpose(1, 2)
        return kv.split([self.dq, self.dv], dim=-1)

    def _attend(self, q, k, v, mask) -> torch.Tensor:
        # an all-False row gives a zero output (SDPA, as transformers' sdpa path): rows before the first pool
        # completes when the tail is off
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1), scale=self.dq ** -0.5)
        return self.o_proj(o.transpose(1, 2).flatten(-2))
