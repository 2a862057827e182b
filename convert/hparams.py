"""Hyper-parameters of a GLM-5.3-Flash checkpoint and the GGUF metadata they become (docs/gguf.md, Metadata).

Hub configs keep the text model's fields in `text_config`; text-only ("flat") configs keep them at the top
level. Both are read, text_config first. Absent fields take transformers 5.23's `Glm5NextTextConfig`
defaults, because transformers is the reference for what a config means.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ConversionError
from .fields import Fields, json_type, show

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


MAX_LAYERS = 2**16  # the converter builds per-layer lists: a corrupt num_hidden_layers must not exhaust memory


def config_fields(config: dict) -> Fields:
    """config.json as Fields: the text model's fields from `text_config` first, then the top level.

    Raises ConversionError for an unknown model_type or a text_config that is not an object."""
    top = Fields("config.json", [config])
    model_type = top.string("model_type", nullable=True)
    if model_type not in MODEL_TYPES:
        raise ConversionError(f"config.json: model_type {model_type!r} is not a GLM-5.3-Flash checkpoint "
                              f"(expected one of {', '.join(MODEL_TYPES)})")
    text = config.get("text_config")
    if text is None:
        return top
    if not isinstance(text, dict):
        raise top.fail("text_config", f"expected an object, got {show(text)} ({json_type(text)})")
    return Fields("config.json", [text, config], ["text_config.", ""])


def read_hparams(config: dict) -> HParams:
    """Parse config.json (dict) into HParams.

    Every field is read by type (fields.Fields): a JSON integer where an integer is meant, true/false where a
    boolean is, a finite float32 where a float is. Absent fields take transformers' defaults.
    Raises ConversionError naming the field for a wrong type or range, an unknown model_type, or
    inconsistent schedules (lengths, non-prefix dense layers). The loader's own rules (e.g. index_kpool
    dividing index_topk) are applied by loader_rules.check, on the metadata written from these values.
    """
    f = config_fields(config)
    n = f.integer("num_hidden_layers", 45, hi=MAX_LAYERS)
    default_types = ["linear_attention" if i % 4 != 3 else "indexed_attention" for i in range(n)]
    layer_types = f.str_array("layer_types", ["linear_attention", *DSA_LAYER_TYPES], default_types)
    if len(layer_types) != n:
        raise f.fail(f.find("layer_types")[1], f"has {len(layer_types)} entries, num_hidden_layers is {n}")
    is_dsa = [t != "linear_attention" for t in layer_types]

    indexer_types = f.str_array("indexer_types", ["full", "shared"], ["full"] * n)
    if len(indexer_types) != n:
        raise f.fail(f.find("indexer_types")[1], f"has {len(indexer_types)} entries, num_hidden_layers is {n}")

    mlp_types = f.str_array("mlp_layer_types", ["dense", "sparse"])
    if mlp_types is None:
        k = f.integer("first_k_dense_replace", min(3, n), hi=n)
        mlp_types = ["dense"] * k + ["sparse"] * (n - k)
    elif len(mlp_types) != n:
        raise f.fail(f.find("mlp_layer_types")[1], f"has {len(mlp_types)} entries, num_hidden_layers is {n}")
    n_dense = mlp_types.index("sparse") if "sparse" in mlp_types else n
    if mlp_types != ["dense"] * n_dense + ["sparse"] * (n - n_dense):
        raise ConversionError(f"config.json: dense FFN layers must lead the stack, got mlp_layer_types {mlp_types}")

    lin = f.object("linear_attn_config")

    def lin_field(key: str, flat_key: str) -> tuple[Fields, str] | None:
        """Where linear_attn_config.`key` is, else the flat (older) field `flat_key`; None when neither is."""
        return (lin, key) if lin.has(key) else (f, flat_key) if f.has(flat_key) else None

    at = lin_field("gate_lower_bound", "linear_lower_bound")
    lower = -5.0 if at is None else at[0].number(at[1], nullable=True)
    if lower is None and lin.boolean("safe_gate", True) and f.has("linear_attn_config"):
        lower = -5.0  # transformers' rule for safe_gate without an explicit bound

    def lin_int(key: str, flat_key: str, default: int) -> int:
        at = lin_field(key, flat_key)
        return default if at is None else at[0].integer(at[1])

    share_at = f.find(INDEX_SHARE_KEY)
    share = f.boolean(INDEX_SHARE_KEY, False)
    source = "absent (false)" if share_at is None else (
        "text_config" if share_at[1].startswith("text_config.") else "top level")

    hp = HParams(
        vocab_size=f.integer("vocab_size", 154880), hidden_size=f.integer("hidden_size", 4096),
        intermediate_size=f.integer("intermediate_size", 12288), n_trunk=n,
        n_head=f.integer("num_attention_heads", 64), rms_norm_eps=f.number("rms_norm_eps", 1e-5),
        max_position_embeddings=f.integer("max_position_embeddings", 1048576),
        is_dsa=is_dsa, indexer_full=[t == "full" for t in indexer_types], n_dense_lead=n_dense,
        q_lora_rank=f.integer("q_lora_rank", 1536), kv_lora_rank=f.integer("kv_lora_rank", 512),
        qk_nope_head_dim=f.integer("qk_nope_head_dim", 256), qk_rope_head_dim=f.integer("qk_rope_head_dim", 0),
        v_head_dim=f.integer("v_head_dim", 256),
        index_n_heads=f.integer("index_n_heads", 32), index_head_dim=f.integer("index_head_dim", 128),
        index_topk=f.integer("index_topk", 2048), index_kpool=f.integer("index_kpool", 16),
        index_kpool_select_tail=f.boolean("index_kpool_always_select_tail", True),
        kda_head_dim=lin_int("head_dim", "linear_head_dim", 128),
        kda_n_head=lin_int("num_heads", "linear_num_heads", 64),
        kda_conv_kernel=lin_int("short_conv_kernel_size", "linear_conv_kernel_dim", 4),
        kda_gate_lower_bound=lower,
        n_expert=f.integer("n_routed_experts", 288), n_expert_used=f.integer("num_experts_per_tok", 8),
        n_expert_shared=f.integer("n_shared_experts", 1), n_group=f.integer("n_group", 1),
        topk_group=f.integer("topk_group", 1), moe_intermediate_size=f.integer("moe_intermediate_size", 2048),
        routed_scaling_factor=f.number("routed_scaling_factor", 2.5),
        norm_topk_prob=f.boolean("norm_topk_prob", True), swiglu_limit=f.number("swiglu_limit", 10.0),
        hc_mult=f.integer("hc_mult", 4), hc_sinkhorn_iters=f.integer("hc_sinkhorn_iters", 20),
        hc_eps=f.number("hc_eps", 1e-6), nextn_claimed=f.integer("num_nextn_predict_layers", 0, nullable=True),
        index_share=share, index_share_source=source,
        eos_token_ids=f.int_or_ints("eos_token_id"), pad_token_id=f.integer("pad_token_id", nullable=True),
        tie_word_embeddings=f.boolean("tie_word_embeddings", False),
    )
    if hp.qk_rope_head_dim != 0:
        raise ConversionError(f"config.json: qk_rope_head_dim is {hp.qk_rope_head_dim}; GLM-5.3-Flash is NoPE (0)")
    if hp.kda_n_head != hp.n_head:
        raise ConversionError(f"config.json: linear_attn_config.num_heads {hp.kda_n_head} != num_attention_heads "
                              f"{hp.n_head} (the GGUF stores one head count for both)")
    return hp


def write_metadata(w, arch: str, hp: HParams, n_nextn: int, name: str) -> None:
    """Write every `{arch}.` key of docs/gguf.md (Metadata) for a file with `n_nextn` NextN layers (0 = trunk only).

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


# The config.json field(s) each `{arch}.` key of write_metadata is written from, to name the culprit when the
# loader's rules refuse a value (loader_rules.check). tests/convert/test_convert_loader_rules.py checks it is complete.
CONFIG_FIELD_OF_KEY = {
    "block_count": "num_hidden_layers (+ the NextN layer found)",
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "vocab_size": "vocab_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "layer_types",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.layer_norm_epsilon": "(fixed by the converter: 1e-6)",
    "attention.q_lora_rank": "q_lora_rank",
    "attention.kv_lora_rank": "kv_lora_rank",
    "attention.key_length": "kv_lora_rank + qk_rope_head_dim",
    "attention.value_length": "kv_lora_rank",
    "attention.key_length_mla": "qk_nope_head_dim + qk_rope_head_dim",
    "attention.value_length_mla": "v_head_dim",
    "rope.dimension_count": "qk_rope_head_dim",
    "attention.indexer.head_count": "index_n_heads",
    "attention.indexer.key_length": "index_head_dim",
    "attention.indexer.top_k": "index_topk",
    "attention.indexer.kpool": "index_kpool (with index_topk)",
    "attention.indexer.kpool_select_tail": "index_kpool_always_select_tail",
    "attention.indexer.types": "indexer_types",
    INDEX_SHARE_KEY: INDEX_SHARE_KEY,
    "nextn_predict_layers": "num_nextn_predict_layers (the NextN layer found)",
    "leading_dense_block_count": "mlp_layer_types / first_k_dense_replace",
    "expert_count": "n_routed_experts",
    "expert_used_count": "num_experts_per_tok (with n_routed_experts)",
    "expert_shared_count": "n_shared_experts",
    "expert_group_count": "n_group (with topk_group)",
    "expert_group_used_count": "topk_group",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_weights_scale": "routed_scaling_factor",
    "expert_weights_norm": "norm_topk_prob",
    "expert_gating_func": "(fixed by the converter: sigmoid)",
    "swiglu_clamp_exp": "swiglu_limit",
    "swiglu_clamp_shexp": "swiglu_limit",
    "ssm.conv_kernel": "linear_attn_config.short_conv_kernel_size",
    "kda.head_dim": "linear_attn_config.head_dim",
    "kda.gate_lower_bound": "linear_attn_config.gate_lower_bound",
    "hyper_connection.count": "hc_mult",
    "hyper_connection.sinkhorn_iterations": "hc_sinkhorn_iters",
    "hyper_connection.epsilon": "hc_eps",
}
