"""The whole model: trunk layers (mHC around KDA or DSA, then a dense MLP or MoE), the NextN draft layer, the
embedding and head. Module paths equal the hub's tensor names (model.language_model.layers.<i>..., lm_head), so
`state_dict()` is the checkpoint's tensor set (train/hub.py writes it)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .dsa import DSA, DSAOut
from .kda import KDA
from .mhc import HyperConnection
from .moe import MLP, MoE
from .norms import RMSNorm


def _moe(cfg: dict) -> MoE:
    return MoE(cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["n_routed_experts"], cfg["num_experts_per_tok"],
               cfg["n_shared_experts"], cfg["swiglu_limit"], cfg["n_group"], cfg["topk_group"],
               cfg["routed_scaling_factor"], cfg["norm_topk_prob"])


class TrunkLayer(nn.Module):
    """Trunk layer i: streams [B, T, hc_mult, hidden] -> streams, through two mHC blocks (attention, FFN)."""

    def __init__(self, cfg: dict, i: int):
        super().__init__()
        hidden, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.hc = HyperConnection(cfg["hc_mult"], hidden, cfg["hc_sinkhorn_iters"], cfg["hc_eps"], eps)
        self.hc.register(self, "hc_attn")
        self.hc.register(self, "hc_ffn")
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        if cfg["layer_types"][i] == "linear_attention":
            lin = cfg["linear_attn_config"]
            self.self_attn = KDA(hidden, lin["num_heads"], lin["head_dim"], lin["short_conv_kernel_size"],
                                 lin["gate_lower_bound"], eps)
        else:
            self.self_attn = DSA(cfg, with_indexer=cfg["indexer_types"][i] == "full")
        dense = cfg["mlp_layer_types"][i] == "dense"
        self.mlp = MLP(hidden, cfg["intermediate_size"], cfg["swiglu_limit"]) if dense else _moe(cfg)

    def forward(self, streams: torch.Tensor, shared_mask: torch.Tensor | None) -> tuple[torch.Tensor, DSAOut | None]:
        """Returns the new streams and, for a DSA layer, its output record (selection mask, indexer loss)."""
        x, post, comb = self.hc.pre(streams, self.hc_attn_fn, self.hc_attn_base, self.hc_attn_scale)
        dsa = None
        if isinstance(self.self_attn, KDA):
            y = self.self_attn(self.input_layernorm(x))
        else:
            dsa = self.self_attn(self.input_layernorm(x), shared_mask)
            y = dsa.out
        streams = self.hc.post(y, streams, post, comb)
        x, post, comb = self.hc.pre(streams, self.hc_ffn_fn, self.hc_ffn_base, self.hc_ffn_scale)
        return self.hc.post(self.mlp(self.post_attention_layernorm(x)), streams, post, comb), dsa


class NextNLayer(nn.Module):
    """The NextN (MTP) draft layer (docs/model.md, NextN draft head): no mHC, its own full indexer, a MoE.

    A row pairs a hidden state h with the embedding e of the token after it:
    u = eh_proj [enorm(e); hnorm(h)]; a = u + DSA(input_layernorm(u)); o = a + MoE(post_attention_layernorm(a));
    z = shared_head.norm(o) (the caller applies lm_head).
    """

    def __init__(self, cfg: dict):
        super().__init__()
        hidden, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.enorm, self.hnorm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = DSA(cfg, with_indexer=True)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = _moe(cfg)
        self.shared_head = nn.ModuleDict({"norm": RMSNorm(hidden, eps)})

    def forward(self, emb: torch.Tensor, hidden: torch.Tensor, step0: DSAOut | None = None
                ) -> tuple[torch.Tensor, DSAOut | None]:
        """emb, hidden [B, R, hidden] -> (z [B, R, hidden], the DSA record).

        Without `step0` every row runs the indexer over the rows up to its own (draft step 0). With `step0` (the
        record of a step-0 pass over the same positions), row p attends step 0's keys under step 0's selection
        S(p): a later draft step under index_share_for_mtp_iteration, which never sees the new rows.
        """
        u = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden)], dim=-1))
        x = self.input_layernorm(u)
        if step0 is None:
            dsa = self.self_attn(x)
            a = u + dsa.out
        else:
            dsa = None
            a = u + self.self_attn.attend(x, step0.latent, step0.mask)
        o = a + self.mlp(self.post_attention_layernorm(a))
        return self.shared_head["norm"](o), dsa


class LanguageModel(nn.Module):
    """model.language_model: embed_tokens, layers (trunk layers, then the NextN layer at num_hidden_layers), norm."""

    def __init__(self, cfg: dict):
        super().__init__()
        n = cfg["num_hidden_layers"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([TrunkLayer(cfg, i) for i in range(n)] + [NextNLayer(cfg)])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.hc_mult, self.n_trunk = cfg["hc_mult"], n


@dataclass
class TrunkOut:
    hidden: torch.Tensor          # [B, T, hidden] post-norm: what lm_head and the draft head read
    dsa: list[DSAOut]             # one record per DSA layer (selections, indexer losses)


class Glm5NextTrain(nn.Module):
    """Glm5NextForConditionalGeneration's text model plus its NextN layer, for training (fp32).

    cfg: the checkpoint's text_config (config.json, or make_checkpoint.text_config(spec)).
    """

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        self.model = nn.ModuleDict({"language_model": LanguageModel(cfg)})
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    @property
    def lm(self) -> LanguageModel:
        return self.model["language_model"]

    @property
    def nextn(self) -> NextNLayer:
        return self.lm.layers[self.lm.n_trunk]

    def trunk(self, ids: torch.Tensor) -> TrunkOut:
        """ids [B, T] int64 -> post-norm hidden states (the embedding is repeated into hc_mult streams; after the
        last layer the streams are averaged, then normalized)."""
        streams = self.lm.embed_tokens(ids).unsqueeze(2).expand(-1, -1, self.lm.hc_mult, -1)
        mask, records = None, []
        for layer in self.lm.layers[: self.lm.n_trunk]:
            streams, dsa = layer(streams, mask)
            if dsa is not None:
                mask = dsa.mask  # a "shared" layer attends the last full layer's selection
                records.append(dsa)
        return TrunkOut(self.lm.norm(streams.mean(2)), records)

    def draft(self, hidden: torch.Tensor, next_ids: torch.Tensor, step0: DSAOut | None = None):
        """Draft rows (hidden [B, R, hidden], next_ids [B, R]) -> (z [B, R, hidden], DSA record); see NextNLayer."""
        return self.nextn(self.lm.embed_tokens(next_ids), hidden, step0)


@torch.no_grad()
def init_weights(model: Glm5NextTrain, std: float = 0.02, seed: int = 0) -> None:
    """Initial weights for training from scratch, deterministic by seed (the router bias buffers stay 0).

    As transformers' Glm5Next init: normal(std) projections, unit norms, mHC fn ~ normal(std) with base 0 and
    scale 1, A_log 0 (under the gate's lower bound), dt_bias = softplus^-1(dt) with dt ~ logU[1e-3, 1e-1], zero
    ape, the short conv at nn.Conv1d's default scale. Two differences: the kpool gate is normal(std), not ones, so
    that pooling starts near a plain average instead of near one-hot; the embedding is normal(1), not normal(std),
    so that the token's identity dominates the residual streams at the start (with std: held-out trunk loss 6.76
    after 60 steps of 4k tokens, still near the unigram loss; with 1: 5.94).
    """
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("norm.weight") or leaf.endswith("_scale"):
            p.fill_(1.0)
        elif leaf in ("A_log", "index_kpool_compress_ape", "bias") or leaf.endswith("_base"):
            p.zero_()
        elif name.endswith("embed_tokens.weight"):
            p.copy_(torch.randn(p.shape, generator=g))
        elif "_conv1d." in name:  # nn.Conv1d's default scale (fan_in = kernel), as transformers' conv module
            p.uniform_(-p.shape[-1] ** -0.5, p.shape[-1] ** -0.5, generator=g)
        elif leaf == "dt_bias":
            dt = torch.exp(torch.rand(p.shape, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            p.copy_(dt + torch.log(-torch.expm1(-dt)))
        else:
            p.copy_(torch.randn(p.shape, generator=g) * std)
