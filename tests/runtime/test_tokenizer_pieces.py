"""Long texts are tokenized piece by piece (glm5next_runtime/text_pieces.py): the pieces' ids, concatenated, are
the ids of the whole text (random texts built to hit every cut rule, with the real tokenizer of a generated
checkpoint), and Tokenizer.encode(max_tokens=...) stops early with a prefix of the full answer."""
from __future__ import annotations

import random

import pytest

from glm5next_runtime import Model
from glm5next_runtime.text_pieces import PIECE_CHARS, pieces

# the kinds of text around a cut: letters, digit runs (grouped by three), punctuation runs that take newlines,
# contractions, runs of spaces, newlines, non-ASCII letters, and the added tokens (control and user-defined)
ATOMS = ["a", "hello", "World", "1", "12345", "3.14", ".", "!?", "--", "'s", "'ll", " ", "  ", "\t", "\n",
         "\r\n", "é", "日本語", "🙂", "<|user|>", "<|assistant|>", "[gMASK]", "<sop>", "<think>", "</think>",
         "<|endoftext|>", "<|", "|>", "<", ">"]


@pytest.fixture(scope="module")
def tokenizer(checkpoints):
    return Model(checkpoints.convert(checkpoints.make("load-tiny", dtype="f32"), outtype="f32"), n_ctx=64,
                 n_threads=1).tokenizer


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ATOMS) for _ in range(n))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("parse_special", [True, False])
def test_pieces_tokenize_like_the_whole_text(tokenizer, seed, parse_special):
    rng = random.Random(seed)
    text = random_text(rng, rng.randrange(50, 400))
    cut = list(pieces(text, tokenizer.added_tokens, size=rng.randrange(4, 40)))
    assert "".join(cut) == text and len(cut) > 1
    # the reference: the whole text at once (shorter than PIECE_CHARS, so encode does not cut it)
    assert len(text) < PIECE_CHARS
    whole = tokenizer.encode(text, parse_special=parse_special)
    by_piece = [i for piece in cut for i in tokenizer.encode(piece, parse_special=parse_special)]
    assert by_piece == whole


def test_a_text_without_a_safe_cut_stays_whole(tokenizer):
    for text in ("a" * 5000, "日本語" * 2000, "x\n" * 3000, " " * 3000, "日 本" * 2000):
        assert list(pieces(text, tokenizer.added_tokens, size=64)) == [text]


def test_max_tokens_stops_early_with_a_prefix(tokenizer):
    text = "hello world, " * 50_000  # 650 kB, 500,000 tokens
    full = tokenizer.encode(text)
    short = tokenizer.encode(text, max_tokens=1000)
    assert 1000 < len(short) <= 1000 + PIECE_CHARS < len(full) // 4 and short == full[:len(short)]
    assert tokenizer.encode("hello world", max_tokens=1000) == tokenizer.encode("hello world")


def test_no_cut_splits_an_added_token_that_holds_a_space():
    text = "ab cd " * 200
    cut = list(pieces(text, ["b c"], size=16))
    assert "".join(cut) == text and len(cut) > 1
    ends = [sum(map(len, cut[:i + 1])) for i in range(len(cut) - 1)]
    assert not any(text.startswith("b c", p - k) for p in ends for k in (1, 2))  # no cut inside an occurrence
    assert all(text.startswith(" ab", p) for p in ends)  # after "cd": a space the rule alone could also take
