#!/usr/bin/env python3
"""A sequence's cache memory by context length, for a model from its hub config.json alone (issue 27): what one
server slot holds at -c N, with and without drafting, and what its context checkpoints may add. Without a config,
GLM-5.3-Flash's (the hub's text_config values, README's table). The figures are glm5next_runtime.cache_sizes',
which tests/runtime/test_cache_sizes.py holds to the engine's on small checkpoints. The attention rows are of the
cache type (-ctk, f16 by default), the KDA states and checkpoints f32.

    python scripts/cache_table.py [config.json] [--ctx 8192,32768,131072,1048576] [--ctx-checkpoints 32] [-ctk f16]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from glm5next_runtime.cache_sizes import CACHE_TYPES, sequence_cache_bytes

# GLM-5.3-Flash's text_config, the fields the caches depend on: 45 layers, KDA except every 4th (3, 7, ..., 43),
# every indexer full, one NextN layer
GLM_5_3_FLASH = {"text_config": {
    "hidden_size": 4096, "kv_lora_rank": 512, "index_head_dim": 128, "index_kpool": 4,
    "layer_types": ["deepseek_sparse_attention" if i % 4 == 3 else "linear_attention" for i in range(45)],
    "indexer_types": ["full"] * 45, "num_nextn_predict_layers": 1,
    "linear_attn_config": {"num_heads": 64, "head_dim": 128, "short_conv_kernel_size": 4},
}}


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path, nargs="?", help="a hub config.json (default: GLM-5.3-Flash's)")
    p.add_argument("--ctx", default="8192,32768,131072,1048576", help="context lengths, comma-separated")
    p.add_argument("--ctx-checkpoints", type=int, default=32, help="the server's --ctx-checkpoints")
    p.add_argument("-ctk", "--cache-type-k", choices=list(CACHE_TYPES), default="f16",
                   help="the attention caches' row type (the server's -ctk)")
    a = p.parse_args()
    config = json.loads(a.config.read_text()) if a.config else GLM_5_3_FLASH
    print("| n_ctx | caches per slot, --spec-type none | with draft-mtp | per token (none / draft-mtp) | "
          f"one checkpoint | {a.ctx_checkpoints} checkpoints (the most per slot) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n_ctx in (int(x) for x in a.ctx.split(",")):
        plain = sequence_cache_bytes(config, n_ctx, drafting=False, cache_type=a.cache_type_k)
        draft = sequence_cache_bytes(config, n_ctx, drafting=True, cache_type=a.cache_type_k)
        print(f"| {n_ctx:,} | {gib(plain['total'])} | {gib(draft['total'])} | "
              f"{plain['per_token'] / 1024:.1f} / {draft['per_token'] / 1024:.1f} KiB | {gib(plain['checkpoint'])} | "
              f"{gib(a.ctx_checkpoints * plain['checkpoint'])} |")


if __name__ == "__main__":
    main()
