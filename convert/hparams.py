"""Hyper-parameters of a GLM-5.3-Flash checkpoint and the GGUF metadata they become (gguf.md, Metadata).

Hub configs keep the text model's fields in `text_config`; text-only ("flat") configs keep them at the top
level. Both are read, text_config first. Absent fields take transformers 5.23's `Glm5NextTextConfig`
defaults, because transformers is the reference for what a config means.
"""
from __future__ import annotations

from dataclasses import dataclass

from .checkpoint import ConversionError

MODEL_TYPES = ("glm5_next", "glm5_next_text")
ARCHES = ("glm5next", "glm5-next")
DSA_LAYER_TYPES = ("indexed_attention", "full_attention", "deepseek_sparse_attention")
INDEX_SHARE_KEY = "index_share_for_mtp_iteration"


@dataclass
class HParams:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_trunk: int                 # num_hidden_layers (trunk only)
    n_head: int
    rms_norm_eps: float
    max_position_embeddings: int
    is_dsa: list[bool]           # per trunk layer: True = DSA (sparse MLA), False = KDA
    indexer_full: list[bool]     # per trunk layer: True = "full" indexer, False = "shared"
    n_dense_lead: int            # leading dense FFN layers
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    index_kpool: int
    index_kpool_select_tail: bool
    kda_head_dim: int
    kda_n_head: int
    kda_conv_kernel: int
    kda_gate_lower_bound: float | None
    n_expert: int
    n_expert_used: int
    n_expert_shared: int
    n_group: int
    topk_group: int
    moe_intermediate_size: int
    routed_scaling_factor: float
    norm_topk_prob: bool
    swiglu_limit: float
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    nextn_claimed: int           # num_nextn_predict_layers as the config states it
    index_share: bool
    index_share_source: str      # "text_config", "top level" or "absent (false)"
    eos_token_ids: list[int]
    pad_token_id: int | None
    tie_word_embeddings: bool


def _text_and_top(config: dict) -> tuple[dict, dict]:
    top_type = config.get("model_type")
    text = config.get("text_config")
    if top_type not in MODEL_TYPES:
        raise ConversionError(f"config.json: model_type {top_type!r} is not a GLM-5.3-Flash checkpoint "
                              f"(expected one of {', '.join(MODEL_TYPES)})")
    if isinstance(text, dict):
        return text, config
    return config, config


def read_hparams(config: dict) -> HParams:
    """Parse config.json (dict) into HParams. Raises ConversionError for an unknown model_type or
    inconsistent schedules (lengths, non-prefix dense layers, kpool not dividing index_topk)."""
    text, top = _text_and_top(config)

    def get(key, default=None):
        return text.get(key, top.get(key, default))

    n = int(get("num_hidden_layers", 45))
    layer_types = get("layer_types") or ["linear_attention" if i % 4 != 3 else "indexed_attention" for i in range(n)]
    if len(layer_types) != n:
        raise ConversionError(f"config.json: layer_types has {len(layer_types)} entries, num_hidden_layers is {n}")
    unknown = sorted(set(layer_types) - {"linear_attention", *DSA_LAYER_TYPES})
    if unknown:
        raise ConversionError(f"config.json: unknown layer_types {unknown}")
    is_dsa = [t != "linear_attention" for t in layer_types]

    indexer_types = get("indexer_types") or ["full"] * n
    if len(indexer_types) != n or set(indexer_types) - {"full", "shared"}:
        raise ConversionError(f"config.json: indexer_types must be {n} entries of 'full'/'shared', got {indexer_types}")

    mlp_types = get("mlp_layer_types")
    if mlp_types is None:
        k = int(get("first_k_dense_replace", min(3, n)))
        mlp_types = ["dense"] * k + ["sparse"] * (n - k)
    n_dense = mlp_types.index("sparse") if "sparse" in mlp_types else n
    if mlp_types != ["dense"] * n_dense + ["sparse"] * (n - n_dense):
        raise ConversionError(f"config.json: dense FFN layers must lead the stack, got mlp_layer_types {mlp_types}")

    lin = get("linear_attn_config") or {}
    lower = lin.get("gate_lower_bound", get("linear_lower_bound", -5.0))
    if lower is None and lin.get("safe_gate", True) and "linear_attn_config" in text:
        lower = -5.0  # transformers' rule for safe_gate without an explicit bound

    if INDEX_SHARE_KEY in text:
        share, source = bool(text[INDEX_SHARE_KEY]), "text_config" if text is not top else "top level"
    elif INDEX_SHARE_KEY in top:
        share, source = bool(top[INDEX_SHARE_KEY]), "top level"
    else:
        share, source = False, "absent (false)"

    eos = get("eos_token_id")
    hp = HParams(
        vocab_size=int(get("vocab_size", 154880)), hidden_size=int(get("hidden_size", 4096)),
        intermediate_size=int(get("intermediate_size", 12288)), n_trunk=n,
        n_head=int(get("num_attention_heads", 64)), rms_norm_eps=float(get("rms_norm_eps", 1e-5)),
        max_position_embeddings=int(get("max_position_embeddings", 1048576)),
        is_dsa=is_dsa, indexer_full=[t == "full" for t in indexer_types], n_dense_lead=n_dense,
        q_lora_rank=int(get("q_lora_rank", 1536)), kv_lora_rank=int(get("kv_lora_rank", 512)),
        qk_nope_head_dim=int(get("qk_nope_head_dim", 256)), qk_rope_head_dim=int(get("qk_rope_head_dim", 0)),
        v_head_dim=int(get("v_head_dim", 256)),
        index_n_heads=int(get("index_n_heads", 32)), index_head_dim=int(get("index_head_dim", 128)),
        index_topk=int(get("index_topk", 2048)), index_kpool=int(get("index_kpool", 16)),
        index_kpool_select_tail=bool(get("index_kpool_always_select_tail", True)),
        kda_head_dim=int(lin.get("head_dim", get("linear_head_dim", 128))),
        kda_n_head=int(lin.get("num_heads", get("linear_num_heads", 64))),
        kda_conv_kernel=int(lin.get("short_conv_kernel_size", get("linear_conv_kernel_dim", 4))),
        kda_gate_lower_bound=None if lower is None else float(lower),
        n_expert=int(get("n_routed_experts", 288)), n_expert_used=int(get("num_experts_per_tok", 8)),
        n_expert_shared=int(get("n_shared_experts", 1)), n_group=int(get("n_group", 1)),
        topk_group=int(get("topk_group", 1)), moe_intermediate_size=int(get("moe_intermediate_size", 2048)),
        routed_scaling_factor=float(get("routed_scaling_factor", 2.5)),
        norm_topk_prob=bool(get("norm_topk_prob", True)), swiglu_limit=float(get("swiglu_limit", 10.0)),
        hc_mult=int(get("hc_mult", 4)), hc_sinkhorn_iters=int(get("hc_sinkhorn_iters", 20)),
        hc_eps=float(get("hc_eps", 1e-6)), nextn_claimed=int(get("num_nextn_predict_layers", 0) or 0),
        index_share=share, index_share_source=source,
        eos_token_ids=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
        pad_token_id=get("pad_token_id"), tie_word_embeddings=bool(get("tie_word_embeddings", False)),
    )
    if hp.index_kpool <= 1 or hp.index_topk % hp.index_kpool:
        raise ConversionError(f"config.json: index_kpool {hp.index_kpool} must be > 1 and divide "
                              f"index_topk {hp.index_topk}")
    if hp.qk_rope_head_dim != 0:
        raise ConversionError(f"config.json: qk_rope_head_dim is {hp.qk_rope_head_dim}; GLM-5.3-Flash is NoPE (0)")
    if hp.kda_n_head != hp.n_head:
        raise ConversionError(f"config.json: linear_attn_config.num_heads {hp.kda_n_head} != num_attention_heads "
                              f"{hp.n_head} (the GGUF stores one head count for both)")
    return hp


def write_metadata(w, arch: str, hp: HParams, n_nextn: int, name: str) -> None:
    """Write every `{arch}.` key of gguf.md for a file with `n_nextn` NextN layers (0 = trunk only).

    `w` is a gguf.GGUFWriter created with `arch`.
    """
    import gguf

    p = arch + "."
    n_all = hp.n_trunk + n_nextn
    u32 = lambda k, v: w.add_uint32(p + k, int(v))  # noqa: E731
    f32 = lambda k, v: w.add_float32(p + k, float(v))  # noqa: E731

    w.add_name(name)
    u32("block_count", n_all)
    u32("context_length", hp.max_position_embeddings)
    u32("embedding_length", hp.hidden_size)
    u32("feed_forward_length", hp.intermediate_size)
    u32("vocab_size", hp.vocab_size)
    u32("attention.head_count", hp.n_head)
    w.add_array(p + "attention.head_count_kv", [1 if d else 0 for d in hp.is_dsa] + [1] * n_nextn)
    f32("attention.layer_norm_rms_epsilon", hp.rms_norm_eps)
    f32("attention.layer_norm_epsilon", 1e-6)  # the indexer's k_norm LayerNorm
    u32("attention.q_lora_rank", hp.q_lora_rank)
    u32("attention.kv_lora_rank", hp.kv_lora_rank)
    u32("attention.key_length", hp.kv_lora_rank + hp.qk_rope_head_dim)
    u32("attention.value_length", hp.kv_lora_rank)
    u32("attention.key_length_mla", hp.qk_nope_head_dim + hp.qk_rope_head_dim)
    u32("attention.value_length_mla", hp.v_head_dim)
    u32("rope.dimension_count", hp.qk_rope_head_dim)
    u32("attention.indexer.head_count", hp.index_n_heads)
    u32("attention.indexer.key_length", hp.index_head_dim)
    u32("attention.indexer.top_k", hp.index_topk)
    u32("attention.indexer.kpool", hp.index_kpool)
    w.add_bool(p + "attention.indexer.kpool_select_tail", hp.index_kpool_select_tail)
    w.add_array(p + "attention.indexer.types", list(hp.indexer_full))
    w.add_bool(p + INDEX_SHARE_KEY, hp.index_share)
    if n_nextn:
        u32("nextn_predict_layers", n_nextn)
    u32("leading_dense_block_count", hp.n_dense_lead)
    u32("expert_count", hp.n_expert)
    u32("expert_used_count", hp.n_expert_used)
    u32("expert_shared_count", hp.n_expert_shared)
    u32("expert_group_count", hp.n_group)
    u32("expert_group_used_count", hp.topk_group)
    u32("expert_feed_forward_length", hp.moe_intermediate_size)
    f32("expert_weights_scale", hp.routed_scaling_factor)
    w.add_bool(p + "expert_weights_norm", hp.norm_topk_prob)
    u32("expert_gating_func", gguf.ExpertGatingFuncType.SIGMOID)
    w.add_array(p + "swiglu_clamp_exp", [hp.swiglu_limit] * n_all)
    w.add_array(p + "swiglu_clamp_shexp", [hp.swiglu_limit] * n_all)
    u32("ssm.conv_kernel", hp.kda_conv_kernel)
    u32("kda.head_dim", hp.kda_head_dim)
    if hp.kda_gate_lower_bound is not None:
        f32("kda.gate_lower_bound", hp.kda_gate_lower_bound)
    u32("hyper_connection.count", hp.hc_mult)
    u32("hyper_connection.sinkhorn_iterations", hp.hc_sinkhorn_iters)
    f32("hyper_connection.epsilon", hp.hc_eps)
