"""Token log-probabilities in response bodies, from GenerationResult.logprobs / GenerationStream.logprobs entries
(natural log, the target model's distribution before the sampler; ../generate.py TokenLogprob):

- chat (OpenAI's, as llama-server writes it): {"content": [{"id", "token", "bytes", "logprob", "top_logprobs":
  [{"id", "token", "bytes", "logprob"}, ...]}, ...]}; the same list is llama-server's native
  `completion_probabilities`;
- completions (OpenAI's legacy shape): {"tokens": [str], "token_logprobs": [float], "top_logprobs": [{str: float}],
  "text_offset": [int]}, with llama-server's chat-shaped "content" alongside (what its /v1/completions sends). A
  top_logprobs dict holds the N most probable tokens and the generated one (up to N + 1 keys, as OpenAI's).

With llama-server's post_sampling_probs (TokenPieces.post_sampling) the entries are the sampler's distribution's
(natural log of its probabilities after the filters and temperature) and the chat-shaped objects show them as
llama-server does: "prob" and "top_probs" [{"id", "token", "bytes", "prob"}] in place of the logprob fields.

A token is shown as its piece (Tokenizer.token_to_piece; control tokens are empty unless --special, as in the
text): `bytes` the piece's bytes, `token` their UTF-8 text, an incomplete character as U+FFFD (the bytes are exact).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..generate import GenerationStream, TokenLogprob
from ..tokenizer import Tokenizer


class TokenPieces:
    """Token id -> (text, UTF-8 bytes as ints) as responses show it: `special` shows control tokens (--special);
    post_sampling: a request's probabilities are the sampler's, shown as llama-server's "prob" fields."""

    def __init__(self, tokenizer: Tokenizer, special: bool, post_sampling: bool = False):
        self._tokenizer = tokenizer
        self._special = special
        self.post_sampling = post_sampling

    def for_request(self, post_sampling: bool) -> TokenPieces:
        """These pieces, for a request that asks for post-sampling probabilities or not."""
        return self if post_sampling == self.post_sampling else TokenPieces(self._tokenizer, self._special,
                                                                            post_sampling)

    def __call__(self, token: int) -> tuple[str, list[int]]:
        piece = self._tokenizer.token_to_piece(token, self._special)
        return piece.decode("utf-8", errors="replace"), list(piece)


def token_probs(entries: Sequence[TokenLogprob], pieces: TokenPieces) -> list[dict[str, Any]]:
    """OpenAI's chat logprobs `content` list (with llama-server's ids): one object per entry."""
    top = "top_probs" if pieces.post_sampling else "top_logprobs"
    return [_token(e.token, e.logprob, pieces) | {top: [_token(t, lp, pieces) for t, lp in e.top]} for e in entries]


def _token(token: int, logprob: float, pieces: TokenPieces) -> dict[str, Any]:
    text, data = pieces(token)
    value = {"prob": math.exp(logprob)} if pieces.post_sampling else {"logprob": logprob}
    return {"id": token, "token": text, "bytes": data} | value


def chat_logprobs(entries: Sequence[TokenLogprob], pieces: TokenPieces) -> dict[str, Any]:
    """A chat choice's `logprobs`."""
    return {"content": token_probs(entries, pieces)}


def completion_logprobs(entries: Sequence[TokenLogprob], pieces: TokenPieces, offset: int) -> dict[str, Any]:
    """A completion choice's `logprobs`; offset: the text_offset of the first entry's token (characters of the
    completion's tokens before it)."""
    texts = [pieces(e.token)[0] for e in entries]
    offsets = []
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    tops = [{pieces(t)[0]: lp for t, lp in e.top} | {text: e.logprob} for e, text in zip(entries, texts)]
    return {"tokens": texts, "token_logprobs": [e.logprob for e in entries], "top_logprobs": tops,
            "text_offset": offsets, "content": token_probs(entries, pieces)}


class LogprobFeed:
    """The entries of a GenerationStream's tokens not taken yet: `take()` returns those of the tokens fed since the
    last take (GenerationStream.logprobs grows as the stream is iterated)."""

    def __init__(self, stream: GenerationStream):
        assert stream.logprobs is not None, "the generation was started without logprobs"
        self._entries = stream.logprobs
        self._n_taken = 0

    def take(self) -> list[TokenLogprob]:
        new = self._entries[self._n_taken:]
        self._n_taken += len(new)
        return new
