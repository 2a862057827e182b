"""The checks a prompt passes before generation, in one place, and the typed errors they raise.

Model.generate and glm5next-server both call `check_prompt`; they differ only in how much of the context must stay
free after the prompt (`room`): Model.generate lets a prompt fill the context (it then generates nothing), the
server asks for room for at least one token, as llama-server does. Every error is a ValueError, so callers that
only care whether the prompt is acceptable catch that; the server maps each type to its HTTP error.
"""
from __future__ import annotations

from collections.abc import Sequence


class PromptError(ValueError):
    """A prompt that cannot be generated from."""


class EmptyPromptError(PromptError):
    """The prompt has no tokens."""

    def __init__(self) -> None:
        super().__init__("the prompt is empty: generation needs at least one token to continue")


class PromptTooLongError(PromptError):
    """The prompt leaves less than `room` positions of the context free.

    n_prompt_tokens: the prompt's length in tokens, or with `at_least` a lower bound of it (a text refused by
    check_prompt_text before it was tokenized); n_ctx: the context size in tokens; room: the positions that had
    to stay free after the prompt.
    """

    def __init__(self, n_prompt_tokens: int, n_ctx: int, room: int, at_least: bool = False):
        self.n_prompt_tokens, self.n_ctx, self.room, self.at_least = n_prompt_tokens, n_ctx, room, at_least
        free = f" with room for {room} more" if room else ""
        has = "at least " if at_least else ""
        super().__init__(f"the prompt has {has}{n_prompt_tokens} tokens, more than the context holds{free} "
                         f"(n_ctx = {n_ctx})")


class TokenOutOfRangeError(PromptError):
    """A prompt token id outside the vocabulary [0, n_vocab); `token_id` is the first such id."""

    def __init__(self, token_id: int, n_vocab: int):
        self.token_id, self.n_vocab = token_id, n_vocab
        super().__init__(f"prompt: token id {token_id} is outside the vocab [0, {n_vocab})")


def check_prompt(ids: Sequence[int], n_ctx: int, n_vocab: int, room: int = 0) -> None:
    """Check the token ids of a prompt for a context of `n_ctx` tokens and a vocabulary of `n_vocab` ids.

    room: context positions that must stay free after the prompt, i.e. tokens there must be room to generate
        (0: the prompt may fill the context; 1: llama-server's rule).
    Raises (in this order) EmptyPromptError for no ids, PromptTooLongError when len(ids) + room > n_ctx,
    TokenOutOfRangeError for the first id outside [0, n_vocab); all are PromptError, a ValueError.
    """
    if not ids:
        raise EmptyPromptError()
    if len(ids) + room > n_ctx:
        raise PromptTooLongError(len(ids), n_ctx, room)
    bad = next((t for t in ids if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise TokenOutOfRangeError(bad, n_vocab)


def max_text_bytes(n_ctx: int, max_token_bytes: int, room: int = 0) -> int:
    """The most UTF-8 bytes a text can have and still fit in n_ctx - room tokens, when no token stands for more
    than `max_token_bytes` bytes (Tokenizer.max_token_bytes)."""
    return max(n_ctx - room, 0) * max_token_bytes


def check_prompt_text(text: str, n_ctx: int, max_token_bytes: int, room: int = 0) -> None:
    """Refuse, before tokenizing it, a text too long for the context whatever its tokens: a text of B bytes is at
    least ceil(B / max_token_bytes) tokens. Raises PromptTooLongError (at_least=True) with that bound; a text that
    passes may still be too long once tokenized (check_prompt decides). Costs O(1) for a text of more characters
    than the bound allows bytes (a character is at least one byte), else one UTF-8 encoding of a text that small."""
    limit = max_text_bytes(n_ctx, max_token_bytes, room)
    n_bytes = len(text) if len(text) > limit else len(text.encode("utf-8", "surrogatepass"))
    if n_bytes > limit:
        raise PromptTooLongError(-(-n_bytes // max_token_bytes), n_ctx, room, at_least=True)
