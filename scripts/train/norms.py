"""RMSNorm, the one normalization every block uses (fp32 training, so no dtype round trips)."""
from __future__ import annotations

import torch
from torch import nn


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, unweighted (mHC's input norm)."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    """weight * rms(x) over the last dim; `weight` [dim] is the hub's `*norm.weight`."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * rms(x, self.eps)
