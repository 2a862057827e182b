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

    n_prompt_tokens: the prompt's length in tokens; n_ctx: the context size in tokens; room: the positions that had
    to stay free after the prompt.
    """

    def __init__(self, n_prompt_tokens: int, n_ctx: int, room: int):
        self.n_prompt_tokens, self.n_ctx, self.room = n_prompt_tokens, n_ctx, room
        free = f" with room for {room} more" if room else ""
        super().__init__(f"the prompt has {n_prompt_tokens} tokens, more than the context holds{free} "
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
