"""KDA (Kimi delta attention): the linear-attention block of the trunk, with a chunked kernel of batched matmuls."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .norms import RMSNorm

# exp(x) is finite and normal in fp32 for |x| < 87; the chunk kernel factors exp(gc_i - gc_j) through a reference
# point in the middle of the chunk, so it needs |lower_bound| * chunk / 2 below this.
_EXP_SAFE = 80.0


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum x^2 + eps) over the last dim (FLA's form: eps inside the sqrt, as transformers)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def chunk_kda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              chunk: int = 32) -> torch.Tensor:
    """The KDA delta-rule recurrence from a zero state, computed chunk by chunk (fp32, differentiable).

    Per head: S <- diag(exp(g_t)) S; S <- S + k_t (beta_t (v_t - S^T k_t))^T; o_t = S^T q_t.
    q, k: [B, T, H, Dk] float32, L2-normalized (q also scaled by 1/sqrt(Dk)); v: [B, T, H, Dv]; g: [B, T, H, Dk]
    per-channel log-decay of each step, in [-160 / chunk, 0] (the gate's lower bound guarantees it); beta:
    [B, T, H]. Returns o [B, T, H, Dv] float32.

    Inside a chunk the recurrence is the WY/UT form of transformers' chunk_kimi_delta_attention: with the
    in-chunk cumulative decay gc and A[i, j] = beta_i sum_d k_id k_jd exp(gc_id - gc_jd) (j < i), the
    (I + A)^-1 transform turns (beta v, beta k exp(gc)) into U, W; every chunk does this at once. Only the state
    carried from chunk to chunk is a loop (T / chunk small matmuls).
    """
    bsz, seq, heads, dk = k.shape
    dv = v.shape[-1]
    pad = (-seq) % chunk
    # [B, H, N, C, D]; padded rows have k = v = beta = 0 and g = 0: they change nothing
    q, k, v, g = (F.pad(x.transpose(1, 2), (0, 0, 0, pad)).reshape(bsz, heads, -1, chunk, x.shape[-1])
                  for x in (q, k, v, g))
    beta = F.pad(beta.transpose(1, 2), (0, pad)).reshape(bsz, heads, -1, chunk, 1)
    gc = g.cumsum(-2)
    # exp(gc_i - gc_j) = exp(gc_i - r) exp(r - gc_j) with r the middle row: both factors stay finite (|gc - r| is
    # at most chunk/2 steps of decay), so the pairwise decays become one matmul instead of a [C, C, D] tensor.
    mid = gc[..., chunk // 2: chunk // 2 + 1, :]
    k_to_mid = k * torch.exp(gc - mid)
    k_from_mid = k * torch.exp(mid - gc)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=k.device).tril(-1)
    # entries above the diagonal can overflow (they are exp of a positive sum); where() drops them, and their
    # gradient is zero
    a = torch.where(lower, (beta * k_to_mid) @ k_from_mid.transpose(-1, -2), 0.0)
    qk = torch.where(lower | torch.eye(chunk, dtype=torch.bool, device=k.device),
                     (q * torch.exp(gc - mid)) @ k_from_mid.transpose(-1, -2), 0.0)
    rhs = torch.cat([beta * v, beta * k * torch.exp(gc)], dim=-1)
    eye = torch.eye(chunk, dtype=k.dtype, device=k.device)
    uw = torch.linalg.solve_triangular(a + eye, rhs, upper=False, unitriangular=True)
    u, w = uw.split([dv, dk], dim=-1)
    q_decayed = q * torch.exp(gc)                       # decay from the chunk's start to row i
    last = gc[..., -1:, :]
    k_to_end = k * torch.exp(last - gc)                 # decay from row i to the chunk's end
    state_decay = torch.exp(last).transpose(-1, -2)     # [B, H, N, Dk, 1]
    state = q.new_zeros(bsz, heads, dk, dv)
    out = []
    for n in range(q.shape[2]):
        v_new = u[:, :, n] - w[:, :, n] @ state
        out.append(q_decayed[:, :, n] @ state + qk[:, :, n] @ v_new)
        state = state * state_decay[:, :, n] + k_to_end[:, :, n].transpose(-1, -2) @ v_new
    o = torch.stack(out, dim=2).reshape(bsz, heads, -1, dv)[:, :, :seq]
    return o.transpose(1, 2)


class KDA(nn.Module):
    """The linear_attention block. Parameter names are the hub's (`self_attn.q_conv1d.weight`, `self_attn.A_log`...).

    forward(x [B, T, hidden] float32) -> [B, T, hidden]: q, k, v projections, causal depthwise conv (kernel 4)
    + SiLU, the forget gate g = lower_bound * sigmoid(exp(A_log) * (f_b(f_a x) + dt_bias)), beta = sigmoid(b x),
    the delta rule (chunk_kda), a per-head RMSNorm gated by sigmoid(g_b(g_a x)), o_proj.
    """

    def __init__(self, hidden: int, heads: int, head_dim: int, conv_kernel: int, lower_bound: float, eps: float,
                 chunk: int = 32):
        super().__init__()
        if lower_bound is None or abs(lower_bound) * chunk / 2 > _EXP_SAFE:
            raise NotImplementedError(f"chunk_kda needs gate_lower_bound in [-{2 * _EXP_SAFE / chunk}, 0)")
        inner = heads * head_dim
        self.heads, self.head_dim, self.lower_bound, self.chunk = heads, head_dim, lower_bound, chunk
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(hidden, inner, bias=False) for _ in range(3))
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (_ConvWeight(inner, conv_kernel) for _ in range(3))
        self.f_a_proj = nn.Linear(hidden, head_dim, bias=False)
        self.f_b_proj = nn.Linear(head_dim, inner, bias=False)
        self.dt_bias = nn.Parameter(torch.zeros(inner))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.b_proj = nn.Linear(hidden, heads, bias=False)
        self.g_a_proj = nn.Linear(hidden, head_dim, bias=False)
        self.g_b_proj = nn.Linear(head_dim, inner, bias=False)
        self.o_norm = RMSNorm(head_dim, eps)
        self.o_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, seq, _ = x.shape
        heads = (bsz, seq, self.heads, self.head_dim)
        # one projection and one grouped conv for q, k and v together
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        conv = torch.cat([self.q_conv1d.weight, self.k_conv1d.weight, self.v_conv1d.weight])
        qkv = F.linear(x, w).transpose(1, 2)
        qkv = F.silu(F.conv1d(qkv, conv, padding=conv.shape[-1] - 1, groups=conv.shape[0])[..., :seq])
        q, k, v = (t.reshape(heads) for t in qkv.transpose(1, 2).chunk(3, dim=-1))
        gate = (self.f_b_proj(self.f_a_proj(x)) + self.dt_bias).view(heads)
        g = self.lower_bound * torch.sigmoid(torch.exp(self.A_log).view(1, 1, -1, 1) * gate)
        beta = torch.sigmoid(self.b_proj(x))
        o = chunk_kda(l2norm(q) * self.head_dim ** -0.5, l2norm(k), v, g, beta, self.chunk)
        o = self.o_norm(o) * torch.sigmoid(self.g_b_proj(self.g_a_proj(x)).view(heads))
        return self.o_proj(o.reshape(bsz, seq, -1))


class _ConvWeight(nn.Module):
    """Holds a depthwise conv weight [channels, 1, kernel] under the hub's name `<x>_conv1d.weight`."""

    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(channels, 1, kernel))
