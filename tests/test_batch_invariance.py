"""Batch-invariant rows (issue 15): a row's logits do not depend on how many rows share its ubatch, so a decode
token equals the same row in a verify pass bit for bit and greedy draft-MTP output equals plain decoding on
quantized files as on f32. ggml's CPU backend multiplies one column with vec_dot kernels and several with
llamafile's tinyBLAS (other roundings); graph/blocks.h BlockBuilder::mm multiplies a lone row as two. It costs
decode speed, so it is asked for (Model(batch_invariant=True), --batch-invariant); without it the rows differ
(test_without_it_a_decode_row_may_differ_from_its_verify_row keeps the reason for the option in view)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import random_tokens

# The bench preset's widths (hidden 1024, q_lora 256, ...) on two layers: at these sizes the two kernels differ
# (without BlockBuilder::mm a decode row and its verify row differ by ~0.02 in the logits; at the tiny preset's
# widths they happen to agree, so the tiny models cannot show it).
SHAPE = {"num_hidden_layers": 2, "layer_pattern": "KD", "first_k_dense_replace": 1, "n_routed_experts": 4,
         "moe_intermediate_size": 128, "intermediate_size": 256}
PROMPT = random_tokens(40, seed=3)
ROWS = random_tokens(5, seed=4)


@pytest.fixture(scope="module", params=["q8_0", "q4_0"])
def gguf(request, checkpoints):
    return checkpoints.convert(checkpoints.make("bench-narrow", "bench", dtype="f32", **SHAPE), outtype=request.param)


def verified_and_decoded(gguf, batch_invariant: bool) -> tuple[np.ndarray, np.ndarray]:
    """Logits of ROWS after PROMPT: one verify pass of all of them, and one decode token at a time."""
    from glm5next_runtime import _core
    model = _core.Model(str(gguf), [])
    batched, serial = (_core.Engine(model, 128, 16, 2, batch_invariant=batch_invariant) for _ in range(2))
    batched.eval(PROMPT)
    serial.eval(PROMPT)
    verified = batched.verify(ROWS)["logits"]
    batched.commit(len(ROWS))
    return verified, np.concatenate([serial.eval([t], True)["logits"] for t in ROWS])


def test_decode_rows_equal_verify_rows_bit_for_bit(gguf):
    verified, decoded = verified_and_decoded(gguf, batch_invariant=True)
    assert np.array_equal(verified, decoded)


def test_greedy_draft_mtp_equals_plain_decoding(gguf):
    from glm5next_runtime import Model
    m = Model(gguf, n_ctx=256, n_threads=2, batch_invariant=True)
    for seed in (1, 2):
        prompt = random_tokens(24, seed=seed)
        plain = m.generate(prompt, max_tokens=64, temperature=0, spec_n_max=0, cache_prompt=False)
        spec = m.generate(prompt, max_tokens=64, temperature=0, spec_n_max=3, cache_prompt=False)
        assert spec.tokens == plain.tokens


def test_without_it_a_decode_row_may_differ_from_its_verify_row(gguf):
    """The default (ggml's kernels as they are, the faster decode): at these widths the rows differ, which is why
    the option exists. Should ggml ever make them agree, this fails and the option can go."""
    verified, decoded = verified_and_decoded(gguf, batch_invariant=False)
    assert not np.array_equal(verified, decoded)
    assert np.abs(verified - decoded).max() < 1.0  # rounding, not a different computation
