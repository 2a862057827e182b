"""Text generation (what Model.generate runs): the decode loop over a native generator, the text it may show while
streaming, and its result."""
from __future__ import annotations

import codecs
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from . import _core
    from .grammar import Constraint
    from .tokenizer import Tokenizer

END_OF_GENERATION = ("eos", "eot", "eom")  # Tokenizer.special_ids names whose token ends a generation


def end_of_generation_ids(tokenizer: Tokenizer) -> list[int]:
    """The ids of the END_OF_GENERATION tokens `tokenizer` has, each once, in that order."""
    named = tokenizer.special_ids
    return list(dict.fromkeys(named[name] for name in END_OF_GENERATION if name in named))


class TokenLogprob(NamedTuple):
    """The target model's log-probabilities at one generated token (csrc/runtime/token_probs.h): the natural-log
    softmax of the raw logits of the row that produced it, before the sampler's filters and temperature (the same
    with draft-MTP on and off: the verify pass has the rows).

    token: the generated id; logprob: its log-probability (<= 0); top: the N most probable tokens at its position
    as (id, logprob), most probable first (ties: lower id first); N as asked (Model.generate's logprobs), at most
    n_vocab."""
    token: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass
class GenerationResult:
    """What one generation produced.

    text: the generated text, cut before the first stop string; control tokens are in it only when asked for
        (Model.generate's `special`).
    tokens: the generated ids, prompt excluded, in order; the end-of-generation token is not among them, but the
        tokens that spelled a stop string are (text and tokens then differ by that string).
    finish_reason: "stop" (an end-of-generation token or a stop string) or "length" (max_tokens or n_ctx reached).
    metrics: n_prompt_tokens, n_cached_tokens (of those, resumed from the sequence's cache: not evaluated),
        n_generated (= len(tokens)), prompt_ms (prompt eval), decode_ms (the generation
        rounds: drafting, verifying, sampling), prompt_tokens_per_s, decode_tokens_per_s (0.0 when nothing was
        generated), and the draft-MTP counters n_drafts (rounds that carried drafts), n_drafted, n_accepted,
        acceptance_per_position, drafted_at / accepted_at (rounds that drafted / accepted draft position i),
        rounds_at_length (rounds allowed k drafts, k = 0..n_max: the adaptive draft lengths' choices),
        mean_accepted_length (accepted drafts + 1 per round), draft_ms, verify_ms.
    logprobs: when asked for (Model.generate's logprobs), one TokenLogprob per token of `tokens`, in order; None
        otherwise.
    """

    text: str
    tokens: list[int]
    finish_reason: str
    metrics: dict[str, float]
    logprobs: list[TokenLogprob] | None = None


class TextStream:
    """Token bytes in, text pieces out that are safe to show: complete UTF-8 characters only (a character may be
    split across tokens), nothing from the first stop string on, and any tail that could still grow into a stop
    string held back until it either completes one (dropped) or cannot anymore (shown)."""

    def __init__(self, stop: Sequence[str] = ()):
        """stop: non-empty stop strings."""
        self._stop = tuple(stop)
        self._longest = max((len(s) for s in self._stop), default=0)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # decoded, not yet shown
        self.stopped = False  # a stop string completed; feed and flush return "" from then on

    def feed(self, data: bytes) -> str:
        """Add one token's bytes; return the text that became safe to show (often "")."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(data)
        # A stop string may start in held-back text and end in this piece, so search all pending text.
        hits = [i for s in self._stop if (i := self._pending.find(s)) >= 0]
        if hits:
            self.stopped = True
            out, self._pending = self._pending[:min(hits)], ""
            return out
        cut = len(self._pending) - self._held_back()
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out

    def flush(self) -> str:
        """The held-back rest, at the end of generation. An incomplete UTF-8 tail becomes U+FFFD, as in
        Tokenizer.decode."""
        if self.stopped:
            return ""
        out, self._pending = self._pending + self._decoder.decode(b"", final=True), ""
        return out

    def _held_back(self) -> int:
        """Length of the longest tail of the pending text that is a proper prefix of a stop string."""
        for n in range(min(len(self._pending), self._longest - 1), 0, -1):
            tail = self._pending[-n:]
            if any(s.startswith(tail) for s in self._stop):
                return n
        return 0


class GenerationStream(Iterator[str]):
    """The text pieces of a generation, produced as it is iterated (complete UTF-8 only; their concatenation is
    the result's text). `tokens` are the ids generated so far (the list `pieces` appends them to, see decode), and
    `logprobs` their TokenLogprob entries, one per token of `tokens` (the list `pieces` appends them to; None when
    not asked for): when a piece comes out, both hold every token fed so far, those whose text is still held back
    included, so a reader that remembers how many it has seen gets the entries of the tokens consumed since the
    last piece. `result` is the GenerationResult once the iterator is exhausted, None before. The model belongs to
    the stream until then: another call on it meanwhile corrupts the generation."""

    def __init__(self, pieces: Generator[str, None, GenerationResult], tokens: list[int] | None = None,
                 logprobs: list[TokenLogprob] | None = None):
        self._pieces = pieces
        self.tokens = [] if tokens is None else tokens
        self.logprobs = logprobs
        self.result: GenerationResult | None = None

    def __next__(self) -> str:
        try:
            return next(self._pieces)
        except StopIteration as done:
            if self.result is None:
                self.result = done.value
            raise

    def finish(self) -> GenerationResult:
        """Run the generation to its end and return its result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result


def decode(generator: _core.Generator, tokenizer: Tokenizer, n_ctx: int, prompt: list[int], max_tokens: int,
           stop: Sequence[str], cache_prompt: bool = False, special: bool = False,
           tokens: list[int] | None = None,
           logprobs: list[TokenLogprob] | None = None,
           constraint: Constraint | None = None) -> Generator[str, None, GenerationResult]:
    """Run `generator` on `prompt` (checked: non-empty ids of `tokenizer`'s vocab that fit in the n_ctx-token
    context) until an end-of-generation token, a stop string (non-empty), max_tokens (>= 0), or a full context.
    The sequence starts over, or with cache_prompt resumes from the longest prefix of the prompt it holds
    (_core.Generator.start). Each round of the C++ loop emits one or more tokens (accepted drafts,
    then the target's). Generated control tokens are text only with `special` (Tokenizer.token_to_piece); they
    count as tokens either way. The generated ids are appended to `tokens` as they come (a new list when None:
    GenerationStream.tokens shows them), and with `logprobs` (a list: the generator was made with n_probs >= 0)
    each one's TokenLogprob to it, before the text its token completes is yielded. With a `constraint` (a
    grammar's matcher, grammar.py) every token is one the grammar allows: the rounds run through it (drafts and
    verify rows under its masks). Yields text pieces (see TextStream); returns the GenerationResult."""
    end_ids = set(end_of_generation_ids(tokenizer))
    text = TextStream(stop)
    pieces: list[str] = []
    tokens = [] if tokens is None else tokens
    finish = "length"
    # Every generated token must fit in the context, so that it can be evaluated (e.g. to continue the sequence).
    max_tokens = min(max_tokens, n_ctx - len(prompt))
    if max_tokens == 0:
        generator.start(prompt, cache_prompt)
        return GenerationResult("", [], finish, _metrics(generator.stats, 0, 0.0), logprobs)

    busy = time.perf_counter()
    emitted = [generator.start(prompt, cache_prompt) if constraint is None
               else constraint.start(generator, prompt, cache_prompt)]
    decode_s = time.perf_counter() - busy - generator.stats["prompt_ms"] / 1e3  # the first sample
    while True:
        probs = generator.probs if logprobs is not None else []  # one entry per emitted token
        for i, token in enumerate(emitted):
            if token in end_ids:
                finish = "stop"
                break
            tokens.append(token)
            if logprobs is not None:
                logprobs.append(TokenLogprob(*probs[i]))
            piece = text.feed(tokenizer.token_to_piece(token, special))
            if piece:
                pieces.append(piece)
                yield piece
            if text.stopped:
                finish = "stop"
                break
            if len(tokens) == max_tokens:
                break
        else:
            if generator.room > 0:
                busy = time.perf_counter()
                budget = max_tokens - len(tokens)
                emitted = generator.step(budget) if constraint is None else constraint.step(generator, budget)
                decode_s += time.perf_counter() - busy
                continue
        break
    generator.finish()  # the draft head's rows complete: the next prompt may resume at this sequence's end
    tail = text.flush()
    if tail:
        pieces.append(tail)
        yield tail
    return GenerationResult("".join(pieces), tokens, finish, _metrics(generator.stats, len(tokens), decode_s),
                            logprobs)


def _metrics(stats: dict, n_generated: int, decode_s: float) -> dict:
    """Timings and, when speculating, the draft-MTP counters (runtime.md: drafts, drafted, accepted, acceptance
    per position, mean accepted length, draft vs verify time)."""
    prompt_s = stats["prompt_ms"] / 1e3
    out = {
        "n_prompt_tokens": stats["n_prompt_tokens"],
        "n_cached_tokens": stats["n_cached_tokens"],  # of the prompt, resumed from the sequence's cache
        "n_generated": n_generated,
        "prompt_ms": stats["prompt_ms"],
        "decode_ms": decode_s * 1e3,
        # tokens evaluated per second (llama-server's prompt_per_second: cached tokens excluded)
        "prompt_tokens_per_s": (stats["n_prompt_tokens"] - stats["n_cached_tokens"]) / prompt_s if prompt_s else 0.0,
        "decode_tokens_per_s": n_generated / decode_s if n_generated and decode_s > 0 else 0.0,
    }
    for key in ("n_drafts", "n_drafted", "n_accepted", "acceptance_per_position", "drafted_at", "accepted_at",
                "rounds_at_length", "mean_accepted_length", "draft_ms", "verify_ms"):
        out[key] = stats[key]
    return out
