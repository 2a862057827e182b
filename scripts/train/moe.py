"""FFN blocks: the clamped SwiGLU MLP (dense layers, experts, shared expert) and the sigmoid-routed MoE."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """x [..., hidden] -> down(silu(min(gate x, limit)) * clamp(up x, -limit, limit)) [..., hidden]; hub names
    gate_proj / up_proj / down_proj."""

    def __init__(self, hidden: int, inter: int, limit: float):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.gate_proj(x).clamp(max=self.limit)
        up = self.up_proj(x).clamp(-self.limit, self.limit)
        return self.down_proj(F.silu(gate) * up)


class Router(nn.Module):
    """noaux_tc routing: sigmoid scores pick the experts after adding `e_score_correction_bias`, a buffer that no
    gradient trains (MoE.balance moves it); the picked experts are weighted by their unbiased scores."""

    def __init__(self, hidden: int, n_experts: int, top_k: int, n_group: int, topk_group: int, scaling: float,
                 norm_topk_prob: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_experts, hidden))
        self.register_buffer("e_score_correction_bias", torch.zeros(n_experts))
        self.top_k, self.n_group, self.topk_group = top_k, n_group, topk_group
        self.scaling, self.norm_topk_prob = scaling, norm_topk_prob

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, hidden] -> (weights [N, top_k] float32, expert ids [N, top_k])."""
        scores = torch.sigmoid(F.linear(x, self.weight))
        choice = scores.detach() + self.e_score_correction_bias
        if self.n_group > 1:  # keep the topk_group groups whose two best experts score highest
            groups = choice.unflatten(-1, (self.n_group, -1))
            best = groups.topk(2, dim=-1).values.sum(-1)
            top_groups = best.topk(self.topk_group, dim=-1).indices
            keep = torch.zeros_like(best, dtype=torch.bool).scatter_(1, top_groups, True)
            choice = groups.masked_fill(~keep.unsqueeze(-1), float("-inf")).flatten(-2)
        ids = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return weights * self.scaling, ids


class MoE(nn.Module):
    """Routed experts (clamped SwiGLU each) plus the unscaled shared expert; hub names mlp.gate.*, mlp.experts.<e>.*,
    mlp.shared_experts.*.

    forward(x [B, T, hidden]) -> [B, T, hidden]; in training mode the tokens each expert receives add up in
    `load` [n_experts] until balance() uses them.
    """

    def __init__(self, hidden: int, inter: int, n_experts: int, top_k: int, n_shared: int, limit: float,
                 n_group: int, topk_group: int, scaling: float, norm_topk_prob: bool):
        super().__init__()
        self.gate = Router(hidden, n_experts, top_k, n_group, topk_group, scaling, norm_topk_prob)
        self.experts = nn.ModuleList(MLP(hidden, inter, limit) for _ in range(n_experts))
        self.shared_experts = MLP(hidden, inter * n_shared, limit)
        self.load = torch.zeros(n_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, ids = self.gate(flat)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(ids == e, as_tuple=True)
            if rows.numel():
                out = out.index_add(0, rows, expert(flat[rows]) * weights[rows, slot, None])
        if self.training:  # evaluation does not steer the balance
            self.load += torch.bincount(ids.flatten(), minlength=len(self.experts))
        return (out + self.shared_experts(flat)).view_as(x)

    @torch.no_grad()
    def balance(self, rate: float) -> None:
        """DeepSeek-V3's auxiliary-loss-free balancing: raise the bias of experts that got fewer tokens than the
        mean since the last call, lower it for those that got more (by `rate`), then start counting again."""
        self.gate.e_score_correction_bias += rate * torch.sign(self.load.mean() - self.load)
        self.load.zero_()
