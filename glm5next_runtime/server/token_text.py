"""Token ids as text, the way llama-server writes them (a /detokenize, a native completion's prompt, a stop
string's tokens)."""
from __future__ import annotations

from collections.abc import Sequence

from ..tokenizer import Tokenizer


def token_text(tokenizer: Tokenizer, ids: Sequence[int], special: bool = True) -> str:
    """The text of `ids` as llama-server writes it (token pieces joined; control tokens as their text unless
    `special` is False). Raises ValueError naming an id outside the vocab."""
    return b"".join(tokenizer.token_to_piece(t, special) for t in ids).decode("utf-8", errors="replace")
