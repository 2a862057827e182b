"""The tensor plan: which HF tensors become which GGUF tensor, with which transform (docs/gguf.md, Tensors).

A plan is built from the hyper-parameters and the checkpoint's safetensors headers only; it checks that
every tensor exists with the shape the config implies (and has a float dtype) before any data is read or any
file is written.
Shapes here are numpy order (ggml order reversed).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checkpoint import FLOAT_DTYPES, Checkpoint, ConversionError
from .hparams import HParams

# transforms (docs/gguf.md, Tensors): name -> function of the source arrays
TRANSFORMS = {
    "copy": lambda a: a[0],
    "conv": lambda a: a[0].reshape(1, a[0].shape[0], 1, a[0].shape[-1]),  # [C,1,K] -> ggml {K,1,C,1}
    "neg_exp": lambda a: -np.exp(a[0]),                                  # A_log -> ssm_a = -exp(A_log)
}


@dataclass
class PlannedTensor:
    """One GGUF tensor. `sources` are (HF name, expected HF shape); `kind` is a TRANSFORMS key, "k_b"/"v_b"
    (split of kv_b_proj) or "stack" (experts stacked one after another, streamed)."""
    name: str
    shape: tuple[int, ...]
    sources: list[tuple[str, tuple[int, ...]]]
    kind: str = "copy"
    nextn: bool = False
    meta: dict = field(default_factory=dict)


class _LayerPlanner:
    def __init__(self, ckpt: Checkpoint, hp: HParams, prefix: str, bid: int, nextn: bool):
        self.ckpt, self.hp, self.hf, self.gg, self.nextn = ckpt, hp, f"{prefix}layers.{bid}.", f"blk.{bid}.", nextn
        self.out: list[PlannedTensor] = []

    def put(self, t: PlannedTensor) -> None:
        """Check `t`'s sources at once (a corrupt config fails on its first tensor, before it sizes anything
        else, e.g. a list of 4e9 experts) and plan it."""
        _check_sources(self.ckpt, [t])
        self.out.append(t)

    def add(self, gguf: str, hf: str, shape: tuple[int, ...], kind: str = "copy", out_shape=None):
        out_shape = out_shape or {"conv": lambda s: (1, s[0], 1, s[-1])}.get(kind, lambda s: s)(shape)
        self.put(PlannedTensor(self.gg + gguf, out_shape, [(self.hf + hf, shape)], kind, self.nextn))

    def norms(self):
        h = self.hp.hidden_size
        self.add("attn_norm.weight", "input_layernorm.weight", (h,))
        self.add("ffn_norm.weight", "post_attention_layernorm.weight", (h,))

    def mhc(self):
        h, hc = self.hp.hidden_size, self.hp.hc_mult
        mix = (2 + hc) * hc
        for blk in ("attn", "ffn"):
            self.add(f"hc_{blk}_fn.weight", f"hc_{blk}_fn", (mix, hc * h))
            self.add(f"hc_{blk}_base.weight", f"hc_{blk}_base", (mix,))
            self.add(f"hc_{blk}_scale.weight", f"hc_{blk}_scale", (3,))

    def kda(self):
        hp = self.hp
        h, d, nh = hp.hidden_size, hp.kda_head_dim, hp.n_head
        inner = d * nh
        for x in "qkv":
            self.add(f"attn_{x}.weight", f"self_attn.{x}_proj.weight", (inner, h))
            self.add(f"ssm_conv1d_{x}.weight", f"self_attn.{x}_conv1d.weight", (inner, 1, hp.kda_conv_kernel), "conv")
        self.add("ssm_f_a.weight", "self_attn.f_a_proj.weight", (d, h))
        self.add("ssm_f_b.weight", "self_attn.f_b_proj.weight", (inner, d))
        self.add("ssm_dt.bias", "self_attn.dt_bias", (inner,))
        self.add("ssm_a", "self_attn.A_log", (nh,), "neg_exp")
        self.add("ssm_beta.weight", "self_attn.b_proj.weight", (nh, h))
        self.add("ssm_g_a.weight", "self_attn.g_a_proj.weight", (d, h))
        self.add("ssm_g_b.weight", "self_attn.g_b_proj.weight", (inner, d))
        self.add("ssm_norm.weight", "self_attn.o_norm.weight", (d,))
        self.add("attn_output.weight", "self_attn.o_proj.weight", (h, inner))

    def dsa(self, with_indexer: bool):
        hp = self.hp
        h, nh, qr, kvr = hp.hidden_size, hp.n_head, hp.q_lora_rank, hp.kv_lora_rank
        nope, v = hp.qk_nope_head_dim, hp.v_head_dim
        self.add("attn_q_a.weight", "self_attn.q_a_proj.weight", (qr, h))
        self.add("attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", (qr,))
        self.add("attn_q_b.weight", "self_attn.q_b_proj.weight", (nh * (nope + hp.qk_rope_head_dim), qr))
        self.add("attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", (kvr + hp.qk_rope_head_dim, h))
        self.add("attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", (kvr,))
        kv_b = (nh * (nope + v), kvr)
        # kv_b_proj viewed [heads, nope + v, kvr]: key part first, transposed (docs/gguf.md, Tensors)
        self.add("attn_k_b.weight", "self_attn.kv_b_proj.weight", kv_b, "k_b", out_shape=(nh, kvr, nope))
        self.add("attn_v_b.weight", "self_attn.kv_b_proj.weight", kv_b, "v_b", out_shape=(nh, v, kvr))
        self.out[-2].meta = self.out[-1].meta = {"heads": nh, "nope": nope}
        self.add("attn_output.weight", "self_attn.o_proj.weight", (h, nh * v))
        if with_indexer:
            ih, idim = hp.index_n_heads, hp.index_head_dim
            self.add("indexer.attn_q_b.weight", "self_attn.indexer.wq_b.weight", (ih * idim, qr))
            self.add("indexer.attn_k.weight", "self_attn.indexer.wk.weight", (idim, h))
            self.add("indexer.k_norm.weight", "self_attn.indexer.k_norm.weight", (idim,))
            self.add("indexer.k_norm.bias", "self_attn.indexer.k_norm.bias", (idim,))
            self.add("indexer.proj.weight", "self_attn.indexer.weights_proj.weight", (ih, h))
            self.add("indexer_compressor_gate.weight", "self_attn.indexer.index_kpool_compress_gate", (idim, h))
            self.add("indexer_compressor_ape.weight", "self_attn.indexer.index_kpool_compress_ape",
                     (hp.index_kpool, idim))

    def dense_ffn(self):
        h, f = self.hp.hidden_size, self.hp.intermediate_size
        self.add("ffn_gate.weight", "mlp.gate_proj.weight", (f, h))
        self.add("ffn_up.weight", "mlp.up_proj.weight", (f, h))
        self.add("ffn_down.weight", "mlp.down_proj.weight", (h, f))

    def moe(self):
        hp = self.hp
        h, f, e, fs = hp.hidden_size, hp.moe_intermediate_size, hp.n_expert, hp.moe_intermediate_size * hp.n_expert_shared
        self.add("ffn_gate_inp.weight", "mlp.gate.weight", (e, h))
        self.add("exp_probs_b.bias", "mlp.gate.e_score_correction_bias", (e,))
        for proj, shape in (("gate", (f, h)), ("up", (f, h)), ("down", (h, f))):
            srcs = [(f"{self.hf}mlp.experts.{x}.{proj}_proj.weight", shape) for x in range(e)]
            self.put(PlannedTensor(f"{self.gg}ffn_{proj}_exps.weight", (e, *shape), srcs, "stack", self.nextn))
        self.add("ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", (fs, h))
        self.add("ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", (fs, h))
        self.add("ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", (h, fs))

    def nextn_head(self, ckpt: Checkpoint):
        hp = self.hp
        h, v = hp.hidden_size, hp.vocab_size
        self.add("nextn.eh_proj.weight", "eh_proj.weight", (h, 2 * h))
        self.add("nextn.enorm.weight", "enorm.weight", (h,))
        self.add("nextn.hnorm.weight", "hnorm.weight", (h,))
        self.add("nextn.shared_head_norm.weight", "shared_head.norm.weight", (h,))
        # optional (docs/gguf.md, Tensors): the runtime falls back to token_embd / output
        if self.hf + "embed_tokens.weight" in ckpt:
            self.add("nextn.embed_tokens.weight", "embed_tokens.weight", (v, h))
        if self.hf + "shared_head.head.weight" in ckpt:
            self.add("nextn.shared_head_head.weight", "shared_head.head.weight", (v, h))


def text_prefix(ckpt: Checkpoint) -> str:
    """`model.language_model.` (hub layout) or `model.` (text-only checkpoints)."""
    for prefix in ("model.language_model.", "model."):
        if prefix + "embed_tokens.weight" in ckpt:
            return prefix
    raise ConversionError(f"{ckpt.dir}: no embedding tensor (model.language_model.embed_tokens.weight) in "
                          f"{', '.join(f.name for f in ckpt.files)}")


def count_nextn(ckpt: Checkpoint, hp: HParams, prefix: str) -> int:
    """NextN layers actually present in the weights (never the config's claim alone)."""
    first = f"{prefix}layers.{hp.n_trunk}."
    return 1 if any(n.startswith(first) for n in ckpt.names()) else 0


def build_plan(ckpt: Checkpoint, hp: HParams, n_nextn: int, trunk: bool = True) -> list[PlannedTensor]:
    """Every GGUF tensor in file order. `trunk=False` keeps only what a draft-only file needs (NextN layer,
    token_embd, output_norm, output). Raises ConversionError for a missing or mis-shaped tensor, or one that
    is not a float type; each tensor is checked as it is planned."""
    prefix = text_prefix(ckpt)
    h, v = hp.hidden_size, hp.vocab_size
    plan = [PlannedTensor("token_embd.weight", (v, h), [(prefix + "embed_tokens.weight", (v, h))])]
    _check_sources(ckpt, plan)
    for bid in range(hp.n_trunk if trunk else 0):
        lp = _LayerPlanner(ckpt, hp, prefix, bid, nextn=False)
        lp.norms()
        lp.mhc()
        if hp.is_dsa[bid]:
            lp.dsa(with_indexer=hp.indexer_full[bid])
        else:
            lp.kda()
        lp.dense_ffn() if bid < hp.n_dense_lead else lp.moe()
        plan += lp.out
    for bid in range(hp.n_trunk, hp.n_trunk + n_nextn):
        lp = _LayerPlanner(ckpt, hp, prefix, bid, nextn=True)
        lp.norms()
        lp.dsa(with_indexer=True)  # the draft layer's own indexer is always "full"
        lp.moe()
        lp.nextn_head(ckpt)
        plan += lp.out
    head = "lm_head.weight" if "lm_head.weight" in ckpt or not hp.tie_word_embeddings else prefix + "embed_tokens.weight"
    tail = [PlannedTensor("output_norm.weight", (h,), [(prefix + "norm.weight", (h,))]),
            PlannedTensor("output.weight", (v, h), [(head, (v, h))])]
    _check_sources(ckpt, tail)
    return plan + tail


def _check_sources(ckpt: Checkpoint, plan: list[PlannedTensor]) -> None:
    for t in plan:
        for name, shape in t.sources:
            if name not in ckpt:
                raise ConversionError(f"{ckpt.dir}: tensor {name} (for {t.name}) is missing from the weights")
            found = ckpt.shape(name)
            if found != shape:
                raise ConversionError(f"{ckpt.file_of(name)}: tensor {name} has shape {list(found)}, "
                                      f"expected {list(shape)} from config.json")
            dtype = ckpt.dtype(name)
            if dtype not in FLOAT_DTYPES:
                raise ConversionError(f"{ckpt.file_of(name)}: tensor {name} has dtype {dtype}, expected one of "
                                      f"{', '.join(FLOAT_DTYPES)}")


def materialize(ckpt: Checkpoint, t: PlannedTensor) -> np.ndarray:
    """The float32 data of a non-stacked planned tensor, in its GGUF numpy shape."""
    arrays = [ckpt.read(name) for name, _ in t.sources]
    if t.kind in ("k_b", "v_b"):
        heads, nope = t.meta["heads"], t.meta["nope"]
        kv = arrays[0].reshape(heads, -1, arrays[0].shape[-1])
        out = kv[:, :nope, :].transpose(0, 2, 1) if t.kind == "k_b" else kv[:, nope:, :]
        return np.ascontiguousarray(out)
    return np.ascontiguousarray(TRANSFORMS[t.kind](arrays), dtype=np.float32)
