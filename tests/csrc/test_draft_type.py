"""--spec-draft-type: the draft layer requantized at load (ggml's quantizers) behaves like the same layer
quantized by the converter (gguf-py's), and speculation with it still leaves greedy output unchanged."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import random_tokens


def step0(path, **kw):
    from glm5next_runtime import Model
    from glm5next_runtime.draft import draft
    return draft(Model(path, n_ctx=256, n_threads=2, **kw), random_tokens(60, seed=3), 1).logits[0]


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0"])
def test_requantized_draft_layer_matches_a_converted_one(checkpoints, qtype):
    ckpt = checkpoints.make("dtype-tiny", "tiny", dtype="f32")
    f32 = checkpoints.convert(ckpt, outtype="f32")
    converted = checkpoints.convert(ckpt, tag=f"-mtp{qtype}", outtype="f32", mtp_type=qtype)
    requant, conv, plain = step0(f32, spec_draft_type=qtype), step0(converted), step0(f32)
    # Both are the same layer in the same type, from two quantizers (and the converter keeps the latent and indexer
    # projections at f16 where the runtime keeps them as stored): observed correlation 0.99998. The type does act:
    # against the unquantized head, q4_0 gives 0.99 (and q8_0 0.9998).
    assert np.corrcoef(requant, conv)[0, 1] > 0.9999
    assert not np.array_equal(requant, plain)


def test_greedy_speculation_with_a_q4_0_draft_layer(predictable_gguf):
    from glm5next_runtime import Model

    path = predictable_gguf
    prompt = random_tokens(80, seed=7)
    plain = Model(path, n_ctx=512, n_threads=2, spec_type="none").generate(prompt, 120, temperature=0)
    spec = Model(path, n_ctx=512, n_threads=2, spec_draft_type="q4_0",
                 draft_adaptive=False).generate(prompt, 120, temperature=0)  # fixed lengths: drafts counted below
    assert spec.tokens == plain.tokens
    assert spec.metrics["n_accepted"] > 0


def test_bad_draft_type(checkpoints):
    from glm5next_runtime import Model

    path = checkpoints.convert(checkpoints.make("dtype-tiny", "tiny", dtype="f32"), outtype="f32")
    with pytest.raises(ValueError, match="q8_0 or q4_0"):
        Model(path, n_ctx=64, n_threads=2, spec_draft_type="q5_k")


def test_separate_draft_file(checkpoints):
    """A trunk-only file plus a --mtp-only file draft exactly like the combined file."""
    from glm5next_runtime import Model
    from glm5next_runtime.draft import draft

    ckpt = checkpoints.make("spec-predictable", "predictable", dtype="f32")
    combined = checkpoints.convert(ckpt, outtype="f32")
    trunk = checkpoints.convert(ckpt, tag="-trunk", outtype="f32", layout="no-mtp")
    head = checkpoints.convert(ckpt, tag="-head", outtype="f32", layout="mtp-only")
    tokens = random_tokens(60, seed=3)
    split = Model(trunk, n_ctx=256, n_threads=2, draft_model=head)
    assert split.spec_type == "draft-mtp"
    assert np.array_equal(draft(split, tokens, 3).logits, draft(Model(combined, n_ctx=256, n_threads=2), tokens, 3).logits)
    plain = Model(trunk, n_ctx=256, n_threads=2)
    assert plain.spec_type == "none"
    assert split.generate(tokens, 50, temperature=0).tokens == plain.generate(tokens, 50, temperature=0).tokens
    with pytest.raises(ValueError, match="does not fit"):
        Model(trunk, n_ctx=64, n_threads=2, draft_model=checkpoints.convert(
            checkpoints.make("dtype-wide", "tiny", hidden_size=128), tag="-head", outtype="f32", layout="mtp-only"))
