"""index_share_for_mtp_iteration round-trips from text_config, from the top level, and defaults to false; the
converter says where it found it (the seed bug: a reader that only looked at the top level turned it off)."""
from __future__ import annotations

import pytest

from test_convert_roundtrip import meta

KEY = "glm5next.index_share_for_mtp_iteration"


@pytest.mark.parametrize("where, value, flat, said", [
    ("text_config", True, False, "from text_config"),
    ("text_config", False, False, "from text_config"),
    ("top", True, False, "from top level"),
    ("top", True, True, "from top level"),   # flat (text-only) config
    (None, True, False, "from absent (false)"),
])
def test_index_share_flag(checkpoints, where, value, flat, said):
    from glm5next_convert import convert

    ckpt = checkpoints.make(f"share-{where}-{value}-{flat}", index_share_at=where, index_share=value,
                            flat_config=flat)
    lines: list[str] = []
    out = convert(ckpt, ckpt.parent / f"{ckpt.name}.gguf", outtype="f32", progress=False, log=lines.append)
    assert meta(out)[KEY] is (value if where else False)
    assert any(said in line for line in lines), lines
