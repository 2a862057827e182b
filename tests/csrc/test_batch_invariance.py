"""Batch-invariant verify passes (issue 15): on the CPU a row's logits do not depend on how many rows share a small
ubatch, so a decode token equals the same row in a verify pass bit for bit and greedy draft-MTP output equals
plain decoding on quantized files as on f32. ggml's CPU backend multiplies one column with vec_dot kernels and
several with llamafile's tinyBLAS (other roundings); graph/blocks.h BlockBuilder::mm multiplies ubatches of up to
kInvariantMaxRows rows through ggml_mul_mat_id, whose kernel is vec_dot per row. Prefill ubatches keep tinyBLAS
(test_a_prefill_row_may_differ_from_its_decode_row keeps the reason for the routing in view)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import new_sequence, random_tokens

# The bench preset's widths (hidden 1024, q_lora 256, ...) on two layers: at these sizes the two kernels differ
# (a decode row and the same row multiplied by tinyBLAS differ by ~0.02 in the logits; at the tiny preset's widths
# they happen to agree, so the tiny models cannot show it).
SHAPE = {"num_hidden_layers": 2, "layer_pattern": "KD", "first_k_dense_replace": 1, "n_routed_experts": 4,
         "moe_intermediate_size": 128, "intermediate_size": 256}
PROMPT = random_tokens(40, seed=3)
ROWS = random_tokens(5, seed=4)
INVARIANT_MAX_ROWS = 16  # graph/blocks.h kInvariantMaxRows


@pytest.fixture(scope="module", params=["q8_0", "q4_0"])
def gguf(request, checkpoints):
    return checkpoints.convert(checkpoints.make("bench-narrow", "bench", dtype="f32", **SHAPE), outtype=request.param)


def decoded(model, prefix: list[int], rows: list[int]) -> np.ndarray:
    """Logits [len(rows), n_vocab] of `rows` after `prefix`, one decode token at a time."""
    serial = new_sequence(model, 128, 64, 2)
    serial.eval(prefix)
    return np.concatenate([serial.eval([t], True)["logits"] for t in rows])


def test_decode_rows_equal_verify_rows_bit_for_bit(gguf):
    from glm5next_runtime import _core
    model = _core.Model(str(gguf), [])
    batched = new_sequence(model, 128, 64, 2)  # the prompt in one ubatch, as decoded() evaluates it
    batched.eval(PROMPT)
    verified = batched.verify(ROWS)["logits"]
    batched.commit(len(ROWS))
    assert np.array_equal(verified, decoded(model, PROMPT, ROWS))


@pytest.mark.parametrize("n_max", [1, 2, 3, 5])
def test_greedy_draft_mtp_equals_plain_decoding(gguf, n_max):
    from glm5next_runtime import Model
    m = Model(gguf, n_ctx=256, n_threads=2, draft_adaptive=False)
    for seed in (1, 2, 3):
        prompt = random_tokens(24, seed=seed)
        plain = m.generate(prompt, max_tokens=48, temperature=0, spec_n_max=0, cache_prompt=False)
        spec = m.generate(prompt, max_tokens=48, temperature=0, spec_n_max=n_max, cache_prompt=False)
        assert spec.metrics["n_drafted"] > 0  # the verify passes ran
        assert spec.tokens == plain.tokens


def test_a_prefill_row_may_differ_from_its_decode_row(gguf):
    """A ubatch of more than kInvariantMaxRows rows (prefill) keeps tinyBLAS, several times faster there: at these
    widths its rows differ from decode rows, which is why BlockBuilder::mm routes small ubatches row by row. Should
    ggml ever make them agree, this fails and the routing can go."""
    from glm5next_runtime import _core
    model = _core.Model(str(gguf), [])
    rows = random_tokens(INVARIANT_MAX_ROWS + 1, seed=5)
    prefill = new_sequence(model, 128, 64, 2)
    prefill.eval(PROMPT)
    batched = prefill.eval(rows, True)["logits"]
    serial = decoded(model, PROMPT, rows)
    assert not np.array_equal(batched, serial)
    assert np.abs(batched - serial).max() < 1.0  # rounding, not a different computation


@pytest.mark.parametrize("n_threads", [2, 3])
def test_decode_logits_do_not_depend_on_the_thread_count(gguf, n_threads):
    """Threads split ggml's matmuls by output rows and graph/sparse_attention_ops.cpp's attention of a decode row by
    heads: every value is the same arithmetic whatever -t, so decode rows (and a verify pass) at -t 2 and -t 3 equal
    -t 1's bit for bit. (A split that loses or repeats a head shows here.)"""
    from glm5next_runtime import _core
    model = _core.Model(str(gguf), [])

    def logits(threads: int) -> np.ndarray:
        seq = new_sequence(model, 128, 64, threads)
        seq.eval(PROMPT)
        rows = [seq.eval([t], True)["logits"] for t in ROWS]
        rows.append(seq.verify(ROWS[:3])["logits"])
        return np.concatenate(rows)

    assert np.array_equal(logits(n_threads), logits(1))
