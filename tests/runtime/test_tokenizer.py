"""The tokenizer rebuilt from a GGUF's vocab gives the ids of the checkpoint's own HF tokenizer, and round-trips."""
from __future__ import annotations

import pytest

from glm5next_runtime import Model, Tokenizer

TEXTS = [
    "Hello world",
    "def f(x):\n    return x**2  # squares\n\n\nclass A:\n\tpass\n",
    "  leading, trailing   and   runs of spaces \t\t tabs\r\n\r\nCRLF  ",
    "digits 1 12 123 1234 12345 3.14159 -7e10",
    "unicode: café naïve Straße 日本語テキスト 한국어 Ελληνικά 🙂👍🏽 \u200b zero-width",
    "I'm sure they'LL say it's 'quoted' and we've DONE it'd",
    "[gMASK]<sop><|user|>\nWhat is 2+2?<|assistant|>\n<think>simple</think>4<|endoftext|>",
    "<tool_call>get<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
    "",
    "\n",
    "a" * 300,
]


@pytest.fixture(scope="module")
def ckpt(checkpoints):
    return checkpoints.make("load-tiny", dtype="f32")


@pytest.fixture(scope="module")
def model(checkpoints, ckpt) -> Model:
    return Model(checkpoints.convert(ckpt, outtype="f32"))


@pytest.fixture(scope="module")
def hf(ckpt):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(ckpt)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_hf_and_round_trip(model, hf, text):
    tok = model.tokenizer
    ids = tok.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert tok.encode(text, parse_special=False) == hf.encode(text, add_special_tokens=False, split_special_tokens=True)
    assert tok.decode(ids) == text == model.detokenize(model.tokenize(text))
    assert b"".join(tok.token_to_piece(i) for i in ids) == text.encode("utf-8")
    assert tok.decode(ids, skip_special=True) == hf.decode(ids, skip_special_tokens=True)


def test_special_tokens(model):
    tok = model.tokenizer
    sp = tok.special_ids
    assert tok.encode("[gMASK]<sop><|user|>\n")[:3] == [sp["bos"], tok.encode("<sop>")[0], sp["eot"]]
    assert len(tok.encode("<|user|>", parse_special=False)) > 1
    assert tok.encode("<think>", parse_special=False) == tok.encode("<think>")  # user-defined: always matched
    assert tok.encode("hi", add_special=True) == tok.encode("hi")  # GLM files set add_bos_token = false


def test_streaming_pieces_split_utf8(model):
    tok = model.tokenizer
    pieces = [tok.token_to_piece(i) for i in tok.encode("日本🙂")]
    assert any(p and not _is_utf8(p) for p in pieces)  # a byte-level token holds part of a character
    assert b"".join(pieces).decode() == "日本🙂"


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_unused_ids_and_bad_ids(model):
    tok = model.tokenizer
    tokens, types = tok.tokens, tok.token_types
    pad = types.index(5)
    assert tokens[pad].startswith("[PAD") and tok.token_to_piece(pad) == b"" and tok.decode([pad]) == ""
    for bad in (-1, tok.n_vocab):
        with pytest.raises(ValueError, match=f"token id {bad}"):
            tok.token_to_piece(bad)
        with pytest.raises(ValueError, match=f"token id {bad}"):
            tok.decode([1, bad])


def test_from_gguf_vocab_checks_its_input():
    with pytest.raises(ValueError, match="2 tokens but 1 token types"):
        Tokenizer.from_gguf_vocab(["a", "b"], [1], [], {})
    with pytest.raises(ValueError, match="merge 'ab'"):
        Tokenizer.from_gguf_vocab(["a", "b", "ab"], [1, 1, 1], ["ab"], {})
    with pytest.raises(ValueError, match=r"token 1 \(b'\\xff'\) is not UTF-8"):
        Tokenizer.from_gguf_vocab(["a", b"\xff"], [1, 1], [], {})
    tok = Tokenizer.from_gguf_vocab(["a", "b", "ab", "<s>"], [1, 1, 1, 3], ["a b"], {"bos": 3}, add_bos=True)
    assert tok.encode("ab", add_special=True) == [3, 2] and tok.encode("ab") == [2]
