"""Cutting a long text into pieces whose token ids, concatenated, are the ids of the whole text, so that a text can
be tokenized piece by piece and the tokenizing stopped once it is known to be too long (Tokenizer.encode's
max_tokens): no more than a piece past the limit is ever tokenized, whatever the text's size.

A cut at position p is safe for GLM's tokenizer (tokenizer.py: added tokens split out first, then the "glm4" split
expression, then byte-level BPE within each split) when
- text[p] is a plain space and text[p-1] visible ASCII (not a space): every alternative of the split expression
  that can hold text[p-1] (a letter run, a digit group, a punctuation run whose [\\r\\n]* cannot take a space, a
  contraction) ends at p, whatever position the matching started from, so p is a split boundary of the whole text
  and of any text that starts with a boundary; and
- no added token occurrence spans p (the added-token split, leftmost-longest, is then the same on both sides).
tests/runtime/test_tokenizer_pieces.py checks the equality on random texts.
"""
from __future__ import annotations

from collections.abc import Collection, Iterator

PIECE_CHARS = 1 << 16


def pieces(text: str, added: Collection[str], size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in consecutive pieces of about `size` characters, cut only at safe positions (see the module
    docstring); `added`: the texts of the tokenizer's added tokens. A stretch without a safe cut stays whole."""
    spanning = [t for t in added if " " in t[1:]]  # only these can span a space
    start = 0
    while len(text) - start > size:
        cut = _last_cut(text, start + size // 2, start + size, spanning)
        if cut is None:
            cut = _first_cut(text, start + size, spanning)
        if cut is None:
            break
        yield text[start:cut]
        start = cut
    yield text[start:]


def _safe(text: str, p: int, spanning: list[str]) -> bool:
    if not "!" <= text[p - 1] <= "~":
        return False
    # an occurrence of `token` inside this window starts before p and ends after it
    return not any(token in text[max(p - len(token) + 1, 0):p + len(token) - 1] for token in spanning)


def _last_cut(text: str, lo: int, hi: int, spanning: list[str]) -> int | None:
    p = text.rfind(" ", lo, hi)
    while p > lo:
        if _safe(text, p, spanning):
            return p
        p = text.rfind(" ", lo, p)
    return None


def _first_cut(text: str, lo: int, spanning: list[str]) -> int | None:
    p = text.find(" ", lo)
    while p > 0:
        if _safe(text, p, spanning):
            return p
        p = text.find(" ", p + 1)
    return None
