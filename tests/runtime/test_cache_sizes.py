"""The cache sizes computed from a hub config (glm5next_runtime/cache_sizes.py, issue 27) are the engine's: on
small checkpoints of several layer schedules (KDA and DSA layers, shared indexers, the bundled model), at n_ctx
that is and is not a multiple of index_kpool, with and without drafting, with f16 (the default), f32 and q8_0 rows, a
sequence's cache bytes and a checkpoint's bytes equal what cache_sizes says from the checkpoint's config.json alone."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from glm5next_runtime.cache_sizes import sequence_cache_bytes

BUNDLED = "models/glm5next-small"


@pytest.mark.parametrize("preset", ["tiny", "shared", "dense-sparse", "bundled"])
@pytest.mark.parametrize("n_ctx", [64, 1001])
@pytest.mark.parametrize("cache_type", ["f16", "f32", "q8_0"])
def test_the_config_gives_the_engines_cache_bytes(checkpoints, preset, n_ctx, cache_type):
    from glm5next_runtime import Model
    if preset == "bundled":
        from glm5next_convert import convert
        ckpt = ROOT / BUNDLED
        gguf = checkpoints.root / "bundled-sizes-q8_0.gguf"
        if not gguf.exists():
            convert(ckpt, gguf, outtype="q8_0", progress=False, log=lambda m: None)
    else:
        ckpt = checkpoints.make(f"sizes-{preset}", preset)
        gguf = checkpoints.convert(ckpt, outtype="q8_0")
    config = json.loads((ckpt / "config.json").read_text())
    for spec_type in ("draft-mtp", "none"):
        m = Model(gguf, n_ctx=n_ctx, n_threads=1, spec_type=spec_type, cache_type_k=cache_type)
        want = sequence_cache_bytes(config, n_ctx, drafting=spec_type == "draft-mtp", cache_type=cache_type)
        assert m.sequence.cache_bytes == want["total"], (preset, spec_type)
        assert m.checkpoints()["bytes_each"] == want["checkpoint"]
