"""mHC (manifold-constrained hyper-connections): the 4 residual streams around every attention and FFN block."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .norms import rms


class HyperConnection:
    """The mixes of one block, from the hub's `hc_<block>_fn` [(2+n)n, n*hidden], `_base` [(2+n)n], `_scale` [3].

    The parameters are registered on the owning layer under those names (`register(layer, "hc_attn")`), so the
    state_dict keeps the hub's flat names; this object only holds the hyper-parameters and the math.
    """

    def __init__(self, n: int, hidden: int, sinkhorn_iters: int, hc_eps: float, norm_eps: float):
        self.n, self.hidden, self.iters, self.hc_eps, self.norm_eps = n, hidden, sinkhorn_iters, hc_eps, norm_eps

    def register(self, layer: nn.Module, prefix: str) -> None:
        mix = (2 + self.n) * self.n
        layer.register_parameter(f"{prefix}_fn", nn.Parameter(torch.zeros(mix, self.n * self.hidden)))
        layer.register_parameter(f"{prefix}_base", nn.Parameter(torch.zeros(mix)))
        layer.register_parameter(f"{prefix}_scale", nn.Parameter(torch.ones(3)))

    def pre(self, streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor):
        """streams [B, T, n, hidden] -> (block input [B, T, hidden], post [B, T, n], comb [B, T, n, n]).

        pre = sigmoid(.) + eps collapses the streams; post = 2 sigmoid(.) expands the block's output; comb is a
        softmax made doubly stochastic by Sinkhorn (columns first, then iters-1 row/column rounds).
        """
        n = self.n
        mix = F.linear(rms(streams.flatten(-2), self.norm_eps), fn)
        pre_w, post_w, comb_w = mix.split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = base.split([n, n, n * n])
        pre = torch.sigmoid(pre_w * scale[0] + pre_b) + self.hc_eps
        post = 2 * torch.sigmoid(post_w * scale[1] + post_b)
        comb = torch.softmax((comb_w * scale[2] + comb_b).unflatten(-1, (n, n)), dim=-1) + self.hc_eps
        comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
        for _ in range(self.iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + self.hc_eps)
            comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
        return (pre.unsqueeze(-1) * streams).sum(-2), post, comb

    @staticmethod
    def post(block_out: torch.Tensor, streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
        """out[d] = post[d] * block_out + sum_s comb[s, d] * streams[s]; [B, T, n, hidden]."""
        return post.unsqueeze(-1) * block_out.unsqueeze(-2) + comb.transpose(-1, -2) @ streams
