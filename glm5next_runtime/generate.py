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
    with draft-MTP on and off: the verify pass has the rows); with post_sampling_probs, the log of the distribution
    the sampler drew it from instead (its filters, temperature, logit bias and grammar applied).

    token: the generated id; logprob: its log-probability (<= 0); top: the N most probable tokens at its position
    as (id, logprob), most probable first (ties: lower id first); N as asked (Model.generate's logprobs), at most
    n_vocab."""
    token: int
    logprob: float
    top: list[tuple[int, float]]


class PromptProgress(NamedTuple):
    """How far a scheduled generation's prompt has come (llama-server's prompt_progress; Scheduler.submit with
    progress=True puts one in its stream when the prompt starts and after every step that evaluated some of it).
    total: the prompt's tokens; cache: of those, resumed from the sequence's cache; processed: in the sequence so
    far (the cached ones included: total once the prompt is done); time_ms: since the prompt started (0 at its
    start)."""
    total: int
    cache: int
    processed: int
    time_ms: float


@dataclass
class GenerationResult:
    """What one generation produced.

    text: the generated text, cut before the first stop string; control tokens are in it only when asked for
        (Model.generate's `special`).
    tokens: the generated ids, prompt excluded, in order; the end-of-generation token is not among them, but the
        tokens that spelled a stop string are (text and tokens then differ by that string).
    finish_reason: "stop" (an end-of-generation token or a stop string) or "length" (max_tokens or n_ctx reached).
    metrics: n_prompt_tokens, n_cached_tokens (of those, resumed from the sequence's cache: not evaluated),
        cache_source (where those came from: "checkpoint" (a context checkpoint), "sequence" (the sequence as the
        last request left it) or "none"),
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
        # a scheduled generation's prompt once evaluated (processed = total, time_ms: its evaluation), before its
        # first piece: what per-token timings report mid-stream (None before, and for Generation.run's streams)
        self.prompt: PromptProgress | None = None

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


class Decoding:
    """What one generation makes of the tokens its rounds emit, whoever runs the rounds (decode below, one
    generation alone; scheduler.py, many on one engine): the text pieces that are safe to show (TextStream), the
    end (an end-of-generation token, a stop string, max_tokens, a full context), the generated ids and their
    log-probabilities, and the result.

    tokenizer: the model's; n_ctx: the context; prompt_len: the prompt's ids; max_tokens (>= 0) and stop (non-empty
    strings) as Model.generate's; special: control tokens shown as text; tokens / logprobs: the lists the generated
    ids and, when asked for (a list), their TokenLogprob entries are appended to (GenerationStream shows them)."""

    def __init__(self, tokenizer: Tokenizer, n_ctx: int, prompt_len: int, max_tokens: int, stop: Sequence[str],
                 special: bool = False, tokens: list[int] | None = None, logprobs: list[TokenLogprob] | None = None):
        self._tokenizer = tokenizer
        self._end_ids = set(end_of_generation_ids(tokenizer))
        self._text = TextStream(stop)
        self._special = special
        self._pieces: list[str] = []
        self.tokens = [] if tokens is None else tokens
        self.logprobs = logprobs
        # Every generated token must fit in the context, so that it can be evaluated (e.g. to continue the sequence).
        self.max_tokens = min(max_tokens, n_ctx - prompt_len)
        self.finish_reason = "length"
        self.done = self.max_tokens == 0

    @property
    def budget(self) -> int:
        """Tokens the generation may still produce (a round's max_tokens)."""
        return self.max_tokens - len(self.tokens)

    def feed(self, emitted: Sequence[int], probs: Sequence[tuple]) -> Iterator[str]:
        """Take a round's emitted tokens (probs: their (token, logprob, top) entries when logprobs are asked for)
        and yield the text pieces they make safe to show, each once its tokens are in `tokens` (and `logprobs`).
        Sets `done` at the end of the generation: what it emitted after the end is dropped."""
        for i, token in enumerate(emitted):
            if token in self._end_ids:
                self.finish_reason = "stop"
                self.done = True
                return
            self.tokens.append(token)
            if self.logprobs is not None:
                self.logprobs.append(TokenLogprob(*probs[i]))
            piece = self._text.feed(self._tokenizer.token_to_piece(token, self._special))
            if piece:
                self._pieces.append(piece)
                yield piece
            if self._text.stopped:
                self.finish_reason = "stop"
                self.done = True
                return
            if len(self.tokens) == self.max_tokens:
                self.done = True
                return

    def end(self) -> Iterator[str]:
        """The held-back text, once the generation ended (by `done` or a full context)."""
        self.done = True
        tail = self._text.flush()
        if tail:
            self._pieces.append(tail)
            yield tail

    def result(self, stats: dict, decode_s: float) -> GenerationResult:
        """The GenerationResult, from the generator's stats and the seconds its rounds took (after end())."""
        return GenerationResult("".join(self._pieces), self.tokens, self.finish_reason,
                                _metrics(stats, len(self.tokens), decode_s), self.logprobs)


@dataclass
class Generation:
    """One generation, checked and ready to run (Model.generation): its generator on a sequence of `engine`, its
    prompt ids (non-empty, in the vocab, within n_ctx), whether the prompt resumes from what the sequence holds
    (cache_prompt, see _core.Generator.start), what it makes of the emitted tokens (`decoding`) and the grammar's
    matcher when one constrains it. run() runs it alone; scheduler.py runs many at once on one engine, their rounds
    batched, with the same tokens."""

    engine: _core.Engine
    generator: _core.Generator
    prompt: list[int]
    cache_prompt: bool
    decoding: Decoding
    constraint: Constraint | None = None

    def run(self) -> Generator[str, None, GenerationResult]:
        """Run the generation alone until an end-of-generation token, a stop string, max_tokens or a full context.
        Each round of the C++ loop emits one or more tokens (accepted drafts, then the target's). With a
        constraint every token is one the grammar allows: the rounds run through it (drafts and verify rows under
        its masks). Yields text pieces (Decoding.feed); returns the GenerationResult."""
        generator, run, constraint = self.generator, self.decoding, self.constraint
        if run.done:
            generator.start(self.prompt, self.cache_prompt)
            return run.result(generator.stats, 0.0)
        busy = time.perf_counter()
        emitted = [generator.start(self.prompt, self.cache_prompt) if constraint is None
                   else constraint.start(generator, self.prompt, self.cache_prompt)]
        decode_s = time.perf_counter() - busy - generator.stats["prompt_ms"] / 1e3  # the first sample
        while True:
            yield from run.feed(emitted, generator.probs if run.logprobs is not None else [])
            if run.done or generator.room <= 0:
                break
            busy = time.perf_counter()
            emitted = generator.step(run.budget) if constraint is None else constraint.step(generator, run.budget)
            decode_s += time.perf_counter() - busy
        generator.finish()  # the draft head's rows complete: the next prompt may resume at this sequence's end
        yield from run.end()
        return run.result(generator.stats, decode_s)

    def run_to_end(self) -> GenerationResult:
        """run() to its end, alone; its result."""
        return GenerationStream(self.run(), self.decoding.tokens, self.decoding.logprobs).finish()


def _metrics(stats: dict, n_generated: int, decode_s: float) -> dict:
    """Timings and, when speculating, the draft-MTP counters (docs/runtime.md, Metrics: drafts, drafted, accepted,
    acceptance per position, mean accepted length, draft vs verify time)."""
    prompt_s = stats["prompt_ms"] / 1e3
    out = {
        "n_prompt_tokens": stats["n_prompt_tokens"],
        "n_cached_tokens": stats["n_cached_tokens"],  # of the prompt, resumed from the sequence's cache
        "cache_source": stats["cache_source"],
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
