"""The cache memory of one sequence, from a model's hub config (issue 27): what csrc/runtime/seq_cache.cpp
allocates per layer, so that a user can size n_ctx for a model this machine cannot load (scripts/cache_table.py
prints GLM-5.3-Flash's table). The attention rows are of the cache type (-ctk: f16 by default; bf16, f32, q8_0 or
q4_0), the pooled keys and KDA states f32:

    DSA (deepseek_sparse_attention) layer   latent [kv_lora_rank, n_ctx]; with a full indexer also its keys and
                                            gates [index_head_dim, n_ctx] each and the pooled keys
                                            [index_head_dim, max(1, n_ctx / index_kpool)]
    KDA (linear_attention) layer            conv window [(K - 1) * 3 * heads * head_dim] and state
                                            [head_dim, head_dim, heads]: fixed, whatever n_ctx
    NextN layer (drafting only)             a DSA layer with a full indexer

A context checkpoint holds every KDA layer's conv window and state, and one hidden row (runtime/checkpoints.h).
tests/runtime/test_cache_sizes.py holds these figures to the engine's on small checkpoints."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

F32 = 4
# the cache types a sequence keeps (_core.Seq cache_type): bytes per block of values, values per block (ggml's)
CACHE_TYPES = {"f16": (2, 1), "bf16": (2, 1), "f32": (4, 1), "q8_0": (34, 32), "q4_0": (18, 32)}
ALIGN = 32  # ggml's CPU buffers place each tensor at a multiple of this (TENSOR_ALIGNMENT)


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's fields of a hub config.json: the `text_config` section when present (and not empty), else
    the top level (flat configs); one section or the other, never merged field by field
    (docs/model.md, Real hyper-parameters)."""
    return config.get("text_config") or config


def _tensor(n_values: int, cache_type: str = "f32") -> int:
    block_bytes, block = CACHE_TYPES[cache_type]
    return -(-n_values // block * block_bytes // ALIGN) * ALIGN


def sequence_cache_bytes(config: Mapping[str, Any], n_ctx: int, drafting: bool,
                         cache_type: str = "f16") -> dict[str, int]:
    """One sequence's caches at n_ctx rows: {"total", "fixed" (the KDA states: what n_ctx does not change),
    "per_token" (the rest, per row, the pooled keys' share rounded as at this n_ctx), "checkpoint" (one context
    checkpoint)}, in bytes. drafting: the NextN layer's caches too (--spec-type draft-mtp); cache_type: the
    attention rows' type (-ctk). Raises KeyError naming a field the config lacks or an unknown cache_type."""
    if cache_type not in CACHE_TYPES:
        raise KeyError(f"cache_type {cache_type!r}")
    t = text_config(config)
    kinds = t["layer_types"]
    indexers = t.get("indexer_types") or ["full"] * len(kinds)
    kda = t["linear_attn_config"]
    heads, head_dim, kernel = kda["num_heads"], kda["head_dim"], kda["short_conv_kernel_size"]
    conv, state = (kernel - 1) * 3 * heads * head_dim, head_dim * head_dim * heads  # floats of a KDA layer's
    kda_bytes = _tensor(conv) + _tensor(state)

    def dsa(full: bool) -> int:
        n = _tensor(t["kv_lora_rank"] * n_ctx, cache_type)
        if full:
            d = t["index_head_dim"]
            n += 2 * _tensor(d * n_ctx, cache_type) + _tensor(d * max(1, n_ctx // t["index_kpool"]))  # pooled: f32
        return n

    n_kda = sum(kind == "linear_attention" for kind in kinds)
    fixed = n_kda * kda_bytes
    growing = sum(dsa(full == "full") for kind, full in zip(kinds, indexers) if kind != "linear_attention")
    if drafting and t.get("num_nextn_predict_layers", 0) > 0:
        growing += dsa(True)
    # a checkpoint copies the states to host memory, unpadded, with the last row's hidden state
    checkpoint = (n_kda * (conv + state) + t["hidden_size"]) * F32
    return {"total": fixed + growing, "fixed": fixed, "per_token": growing // n_ctx, "checkpoint": checkpoint}
