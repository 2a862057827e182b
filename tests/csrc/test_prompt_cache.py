"""Prompt cache (issue 12; runtime/checkpoints.h): a prompt that shares a prefix with what the model's sequence
holds evaluates only the rest, resuming from the sequence as it is or from a context checkpoint (the KDA states
cannot drop rows), and the output is the output of a fresh sequence: greedy tokens equal, and with draft-MTP the
same drafts accepted (the NextN layer's rows for the prefix are kept)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import random_tokens

FIRST = random_tokens(72, seed=31)  # index_topk is 16, kpool 4: sparsity is exercised well before the split points
CHECKPOINT_EVERY = 24               # prefill checkpoints at rows 24, 48, 72 (and one at the end of every prompt)
# where a prompt parts from the sequence: inside the first pool, at and around pool boundaries, around
# index_topk, at and between prefill checkpoints, just before the end of the first prompt
SPLITS = [1, 3, 4, 5, 15, 16, 17, 24, 30, 48, 71]
N_GEN = 12


# Quantized files prefill in ubatches of at most 16 rows (INVARIANT_ROWS): those multiply each row as ggml's vec_dot
# multiplies it alone (graph/blocks.h, BlockBuilder::mm), so a row's logits do not depend on the ubatch that computed
# it and the claim under test, that a resumed sequence is the fresh one, is exact. A longer ubatch takes ggml's
# tinyBLAS, which rounds differently, and on a q8_0 file a rounding can move an activation's quantization step: on an
# AMD EPYC without AVX-512 (AVX2) the 35 rows of a fresh prompt differed from the same rows resumed after a 15-row
# prefill by up to 1.47 in the logits (tiny preset, rows 7 on) and flipped greedy tokens, while ubatches of 16 rows
# gave the same bits for every split (measured in stop 41). f32 files keep 512-row ubatches: their rows differ by
# ~3e-5 there, and their tokens must still be a fresh sequence's.
INVARIANT_ROWS = 16


@dataclass(frozen=True)
class CacheFile:
    path: Path
    n_batch: int  # prompt rows per ubatch

    @staticmethod
    def of(path: Path, outtype: str) -> CacheFile:
        return CacheFile(path, 512 if outtype == "f32" else INVARIANT_ROWS)


# random weights ("tiny"): every state matters to the greedy tokens; "predictable": drafts are accepted at every
# position, so that equal acceptance means something
@pytest.fixture(scope="module", params=["tiny-f32", "tiny-q8_0", "predictable-f32", "predictable-q8_0"])
def gguf(request, checkpoints) -> CacheFile:
    preset, outtype = request.param.split("-")
    return CacheFile.of(checkpoints.convert(checkpoints.make(f"cache-{preset}", preset, dtype="f32"), outtype=outtype),
                        outtype)


def new_model(file: CacheFile, **kw):
    """Fixed draft lengths (draft_adaptive=False): the tests compare drafts and acceptance per position between two
    sequences, and adaptive lengths follow each one's timings."""
    from glm5next_runtime import Model
    return Model(file.path, n_ctx=256, n_threads=2, n_batch=file.n_batch, checkpoint_every=CHECKPOINT_EVERY,
                 draft_adaptive=False, **kw)


@pytest.fixture(scope="module")
def cached(gguf):
    return new_model(gguf)


@pytest.fixture(scope="module")
def fresh(gguf):
    return new_model(gguf)


@pytest.mark.parametrize("spec_n_max", [0, 3])
@pytest.mark.parametrize("split", SPLITS)
def test_cache_hit_gives_the_output_of_a_fresh_sequence(cached, fresh, split, spec_n_max):
    """The sequence holds a checkpoint at `split` (the end of an earlier prompt) and has moved past it; a prompt
    that parts from it there resumes at the checkpoint: rows after it dropped, KDA states copied back."""
    kw = dict(temperature=0, spec_n_max=spec_n_max)
    cached.generate(FIRST[:split], max_tokens=0, **kw)
    cached.generate(FIRST, max_tokens=N_GEN, **kw)
    prompt = FIRST[:split] + random_tokens(20, seed=split)
    hit = cached.generate(prompt, max_tokens=N_GEN, **kw)
    want = fresh.generate(prompt, max_tokens=N_GEN, cache_prompt=False, **kw)
    assert hit.tokens == want.tokens
    assert hit.metrics["n_cached_tokens"] == split
    if spec_n_max:  # the draft head saw the same rows: the same drafts were made and accepted
        for key in ("drafted_at", "accepted_at", "n_drafts"):
            assert hit.metrics[key] == want.metrics[key], key


def test_resumes_at_the_newest_checkpoint_before_the_split(cached):
    cached.generate(FIRST, max_tokens=N_GEN, temperature=0, spec_n_max=0, cache_prompt=False)
    hit = cached.generate(FIRST[:30] + [1, 2], max_tokens=1, temperature=0, spec_n_max=0)
    assert hit.metrics["n_cached_tokens"] == 24  # the prefill checkpoint at row 24; the sequence was past row 30


@pytest.mark.parametrize("spec_n_max", [0, 3])
def test_continuing_the_sequence_evaluates_only_the_new_tokens(cached, fresh, spec_n_max):
    """A prompt that extends everything the sequence evaluated (a chat's next turn) resumes from the sequence as it
    is, generated tokens included (with draft-MTP too: the generation ended by writing the draft head's pending
    rows), and answers as a fresh sequence."""
    kw = dict(temperature=0, spec_n_max=spec_n_max)
    first = cached.generate(FIRST, max_tokens=N_GEN, **kw)
    evaluated = FIRST + first.tokens[:-1]  # the last generated token was sampled, never evaluated
    prompt = FIRST + first.tokens + [5, 6, 7]
    hit = cached.generate(prompt, max_tokens=N_GEN, **kw)
    assert hit.metrics["n_cached_tokens"] == len(evaluated) and hit.metrics["cache_source"] == "sequence"
    want = fresh.generate(prompt, max_tokens=N_GEN, cache_prompt=False, **kw)
    assert hit.tokens == want.tokens
    if spec_n_max:
        assert hit.metrics["accepted_at"] == want.metrics["accepted_at"]


@pytest.mark.parametrize("ending", ["stop-string", "max-tokens", "abandoned-stream"])
def test_cache_hit_after_each_way_a_request_ends(cached, fresh, ending):
    kw = dict(temperature=0, spec_n_max=3)
    if ending == "stop-string":
        text = cached.generate(FIRST, max_tokens=N_GEN, **kw).text
        cached.generate(FIRST, max_tokens=N_GEN, stop=text[len(text) // 2:][:3] or None, **kw)
    elif ending == "max-tokens":
        cached.generate(FIRST, max_tokens=5, **kw)
    else:  # a client that disconnects: the stream is dropped after its first pieces
        stream = cached.generate(FIRST, max_tokens=N_GEN, stream=True, **kw)
        next(stream, None)
        del stream
    prompt = FIRST[:40] + random_tokens(10, seed=99)
    hit = cached.generate(prompt, max_tokens=N_GEN, **kw)
    want = fresh.generate(prompt, max_tokens=N_GEN, cache_prompt=False, **kw)
    assert hit.tokens == want.tokens and hit.metrics["n_cached_tokens"] > 0


@pytest.mark.parametrize("spec_n_max", [0, 3])
@pytest.mark.parametrize("earlier", ["same prompt", "max_tokens 0"])
def test_the_same_prompt_again_evaluates_nothing(cached, fresh, spec_n_max, earlier):
    """The prompt's end keeps its last row's logits: the same prompt sent again (a regenerate, a retry) resumes all of
    it, evaluates nothing and answers as a fresh sequence does."""
    kw = dict(temperature=0, spec_n_max=spec_n_max)
    cached.generate(FIRST, max_tokens=N_GEN if earlier == "same prompt" else 0, **kw)
    hit = cached.generate(FIRST, max_tokens=N_GEN, **kw)
    want = fresh.generate(FIRST, max_tokens=N_GEN, cache_prompt=False, **kw)
    assert hit.metrics["n_cached_tokens"] == len(FIRST) and hit.tokens == want.tokens
    if spec_n_max:
        assert hit.metrics["accepted_at"] == want.metrics["accepted_at"]
    again = cached.generate(FIRST + hit.tokens[:3], max_tokens=N_GEN, **kw)  # and the turn after it still resumes
    assert again.metrics["n_cached_tokens"] >= len(FIRST)


def test_no_common_prefix_starts_over(cached):
    cached.generate(FIRST, max_tokens=2, temperature=0)
    other = random_tokens(30, seed=5)
    assert other[0] != FIRST[0]
    assert cached.generate(other, max_tokens=2, temperature=0).metrics["n_cached_tokens"] == 0


def test_cache_prompt_false_evaluates_everything(cached):
    cached.generate(FIRST, max_tokens=2, temperature=0)
    r = cached.generate(FIRST + [3, 4], max_tokens=2, temperature=0, cache_prompt=False)
    assert r.metrics["n_cached_tokens"] == 0


def test_checkpoints_are_bounded(gguf):
    m = new_model(gguf, ctx_checkpoints=2)
    m.generate(FIRST, max_tokens=2, temperature=0)  # prefill checkpoints at 24, 48, 68 (4 before a raw prompt's end), 72
    stats = m.checkpoints()
    assert stats["count"] == 2 and stats["rows"] == [68, 72] and stats["max_count"] == 2
    assert stats["bytes"] == 2 * stats["bytes_each"] + 4 * m.n_vocab  # the prompt's end keeps its logits too
    hp = m.hparams  # one checkpoint: every KDA layer's conv window and state, and one hidden row (4 bytes each)
    n_kda = sum(1 for kv in hp["head_count_kv"][:hp["n_trunk"]] if kv == 0)
    inner = hp["kda_head_dim"] * hp["n_head"]
    per_layer = (hp["ssm_conv_kernel"] - 1) * 3 * inner + hp["kda_head_dim"] ** 2 * hp["n_head"]
    assert stats["bytes_each"] == 4 * (n_kda * per_layer + hp["n_embd"])


def test_no_checkpoints_still_resumes_the_sequence_as_it_is(gguf):
    m = new_model(gguf, ctx_checkpoints=0)
    first = m.generate(FIRST, max_tokens=4, temperature=0, spec_n_max=0)
    r = m.generate(FIRST + first.tokens + [9], max_tokens=1, temperature=0, spec_n_max=0)
    assert r.metrics["n_cached_tokens"] == len(FIRST) + 3 and m.checkpoints()["count"] == 0
    r = m.generate(FIRST[:10] + [9], max_tokens=1, temperature=0, spec_n_max=0)
    assert r.metrics["n_cached_tokens"] == 0  # no checkpoint to go back to


# ------------------------------------------------------------------------ where a chat's next turn parts (issue 25)

def roles(m) -> dict[str, int]:
    return {r: m.tokenize(f"<|{r}|>")[0] for r in ("system", "user", "assistant", "observation")}


def chat_prompt(m) -> tuple[list[int], int, int]:
    """A rendered chat as GLM's templates write it, ending in the generation prompt "<|assistant|>\n<think>"; the
    rows of its last user message and of its generation prompt."""
    r = roles(m)
    gen = [r["assistant"]] + m.tokenize("\n<think>")
    prompt = [r["system"]] + FIRST[:30] + [r["user"]] + FIRST[30:50] + gen
    return prompt, 31, 52


def test_a_chat_prompt_keeps_checkpoints_where_its_next_turn_parts(cached):
    """Besides every 24 rows and the end: the last user message's start and the generation prompt's (not 4 before
    the end: a message starts within 8 rows of it)."""
    prompt, user, gen = chat_prompt(cached)
    cached.generate(prompt, max_tokens=2, temperature=0, cache_prompt=False)
    assert cached.checkpoints()["rows"] == [24, user, 48, gen, len(prompt)]


@pytest.mark.parametrize("spec_n_max", [0, 3])
def test_a_re_rendered_next_turn_resumes_before_the_generation_prompt(cached, fresh, spec_n_max):
    """The template renders the answer without the think opener its generation prompt had: the next turn parts
    inside the last generation prompt and resumes from the checkpoint before it, answering as a fresh sequence."""
    kw = dict(temperature=0, spec_n_max=spec_n_max)
    prompt, user, gen = chat_prompt(cached)
    first = cached.generate(prompt, max_tokens=N_GEN, cache_prompt=False, **kw)
    r = roles(cached)
    answer = [t for t in first.tokens if t < 384][:5]  # ordinary tokens: the template writes the answer as text
    following = prompt[:gen + 1] + answer + [r["user"]] + FIRST[50:60] + prompt[gen:]
    hit = cached.generate(following, max_tokens=N_GEN, **kw)
    assert hit.metrics["n_cached_tokens"] == gen and hit.metrics["cache_source"] == "checkpoint"
    want = fresh.generate(following, max_tokens=N_GEN, cache_prompt=False, **kw)
    assert hit.tokens == want.tokens
    if spec_n_max:
        assert hit.metrics["accepted_at"] == want.metrics["accepted_at"]


def test_the_last_user_messages_checkpoint_outlives_a_long_tool_loop(gguf):
    """ctx_checkpoints 3 and a tool loop of 8 calls after the user's message (each turn adds checkpoints): the one
    at the user message's start is kept, so that a template that drops the reasoning of every answer after it
    (GLM's, once the next user message comes) still resumes there."""
    m = new_model(gguf, ctx_checkpoints=3)
    r = roles(m)
    prompt, user, gen = chat_prompt(m)
    for call in range(8):
        m.generate(prompt, max_tokens=1, temperature=0, spec_n_max=0)
        prompt = prompt[:-2] + FIRST[call:call + 3] + [r["observation"]] + FIRST[60:64] + prompt[-2:]
    assert user in m.checkpoints()["rows"] and m.checkpoints()["count"] == 3
    stripped = prompt[:gen] + [r["assistant"]] + [7, 8, 9]
    assert m.generate(stripped, max_tokens=1, temperature=0, spec_n_max=0).metrics["n_cached_tokens"] == user
