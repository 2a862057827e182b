"""User-supplied text never becomes control tokens (docs/runtime.md, Server), while a chat template's own markup does.

Both arrive in one rendered string: "[gMASK]<sop><|user|>\\n" is the template's, the message text between is the
user's, and a message saying "<|assistant|>" must not open an assistant turn. So, before rendering, every control
token spelled inside a user-supplied string gets MARK (U+FDD0, a Unicode noncharacter) after its first character:
it no longer spells the token, whatever the template does with the string (slicing, stripping, concatenating). After
rendering, the control tokens the prompt still spells are the template's own; the text between them is tokenized
without special-token parsing, with the marks taken out, so the user's "<|assistant|>" is plain text, token for
token what parse_special=False gives.

MARK characters that a user sends themselves are dropped (a noncharacter has no meaning in text). The roles of chat
messages are checked separately (server/schemas.py): a template writes "<|{{ role }}|>", so a role is markup, and
only the roles templates know are accepted.

This is stricter than llama-server, which parses control tokens in chat content. Raw /v1/completions prompts are the
client's whole prompt, markup included (and a client can send token ids anyway), so they keep parsing them.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .tokenizer import CONTROL, Tokenizer

MARK = "\ufdd0"


class ControlTokenGuard:
    """Marks user strings before a template renders them (`neutralize`) and tokenizes the rendered prompt so that only
    the template's own control tokens are control tokens (`encode`)."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        # a control token of one character could not be marked; GGUF vocabularies have none (llama.cpp's neither)
        texts = sorted({t for t, ty in zip(tokenizer.tokens, tokenizer.token_types) if ty == CONTROL and len(t) > 1},
                       key=len, reverse=True)
        self._control = re.compile("|".join(map(re.escape, texts))) if texts else None
        # where a string meets the template's text: a string that ends with how a control token begins (or begins
        # with how one ends) could complete one with the markup next to it ("<|assist" + "ant|>")
        self._heads = {t[:k] for t in texts for k in range(1, len(t))}
        self._tails = {t[k:] for t in texts for k in range(1, len(t))}
        self._longest = max(map(len, texts), default=0)

    def neutralize(self, value: Any) -> Any:
        """`value` with every str in it (dict keys included, at any depth) marked: it spells no control token, and
        cannot complete one with what is written next to it."""
        if isinstance(value, str):
            return self._mark(value)
        if isinstance(value, Mapping):
            return {self.neutralize(k): self.neutralize(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.neutralize(v) for v in value]
        return value

    def encode(self, prompt: str, add_special: bool = False, max_tokens: int | None = None) -> list[int]:
        """Token ids of a prompt rendered from neutralized strings: the control tokens it spells become their ids,
        everything else is plain text (MARK removed). add_special and max_tokens as in Tokenizer.encode."""
        parts = [p.replace(MARK, "") if isinstance(p, str) else p for p in self._tokenizer.split_control(prompt)]
        return self._tokenizer.encode_parts([p for p in parts if p != ""], add_special=add_special,
                                            max_tokens=max_tokens)

    def _mark(self, text: str) -> str:
        text = text.replace(MARK, "")
        if self._control is None:
            return text
        n = 1
        while n:  # again: marking one token of an overlapping pair ("abc" with "ab" and "bc") leaves the other
            text, n = self._control.subn(_break, text)
        edge = range(1, min(len(text), self._longest - 1) + 1)  # proper heads and tails, up to the whole string
        if any(text[-k:] in self._heads for k in edge):
            text += MARK
        if any(text[:k] in self._tails for k in edge):
            text = MARK + text
        return text


def _break(match: re.Match[str]) -> str:
    token = match[0]
    return token[0] + MARK + token[1:]
