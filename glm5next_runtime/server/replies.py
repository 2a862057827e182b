"""What every API's response is made of: the Reply base (a whole body, or a stream's chunks as server-sent events),
OpenAI's server-sent-event framing (typed events for Anthropic's and Responses' streams), usage and llama-server's
`timings` (whole, and so far while a stream runs), and the stop string that ended a generation. Each API surface
subclasses Reply with its own shapes (openai_chat/, native's completion_reply.py, anthropic/, openai_responses/)."""
from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any

from collections.abc import Callable, Sequence

from ..generate import GenerationResult, GenerationStream, PromptProgress, TokenLogprob
from .build_info import BUILD_INFO
from .errors import APIError
from .logprobs import LogprobFeed
from .slot_tasks import SlotTask

DONE = "data: [DONE]\n\n"


def sse(data: dict[str, Any]) -> str:
    """One server-sent event in OpenAI's framing."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def typed_sse(data: dict[str, Any]) -> str:
    """One server-sent event named by its data's `type` (Anthropic's and OpenAI Responses' framing)."""
    return f"event: {data['type']}\n{sse(data)}"


def usage(m: dict) -> dict[str, Any]:
    """OpenAI's usage from GenerationResult.metrics (prompt_tokens_details.cached_tokens: resumed from the slot's
    prompt cache, as OpenAI and llama-server report it)."""
    return {"prompt_tokens": m["n_prompt_tokens"], "completion_tokens": m["n_generated"],
            "total_tokens": m["n_prompt_tokens"] + m["n_generated"],
            "prompt_tokens_details": {"cached_tokens": m["n_cached_tokens"]}}


def timings(m: dict) -> dict[str, float]:
    """llama-server's timings from GenerationResult.metrics: cache_n prompt tokens resumed from the slot's cache,
    prompt_n evaluated (draft_n: drafted tokens, draft_n_accepted: accepted). The generation's rates are over its
    decode steps, one fewer than its tokens, as llama-server counts them: the first token comes with the prompt's
    logits (0 for a single token)."""
    cache_n = m["n_cached_tokens"]
    return prompt_side(cache_n, m["n_prompt_tokens"] - cache_n, m["prompt_ms"]) \
        | predicted_side(m["n_generated"], m["decode_ms"]) \
        | {"draft_n": m["n_drafted"], "draft_n_accepted": m["n_accepted"]}


def prompt_side(cache_n: int, n: int, ms: float) -> dict[str, float]:
    """The prompt's side of llama-server's timings: cache_n tokens resumed, n evaluated in ms."""
    return {"cache_n": cache_n, "prompt_n": n, "prompt_ms": ms, "prompt_per_token_ms": ms / n if n else 0.0,
            "prompt_per_second": n / ms * 1e3 if ms > 0 else 0.0}


def predicted_side(n: int, ms: float) -> dict[str, float]:
    """The generation's side of llama-server's timings: n tokens in ms, rates over the decode steps (n - 1)."""
    steps = max(n - 1, 0)
    return {"predicted_n": n, "predicted_ms": ms, "predicted_per_token_ms": ms / steps if steps else 0.0,
            "predicted_per_second": steps / ms * 1e3 if ms > 0 else 0.0}


def prompt_timings(prompt: PromptProgress | None) -> dict[str, float]:
    """The prompt's side of llama-server's timings from how far it has come (zeros before it started)."""
    if prompt is None:
        return prompt_side(0, 0, 0.0)
    return prompt_side(prompt.cache, prompt.processed - prompt.cache, prompt.time_ms)


def stopping_word(result: GenerationResult, stops: Sequence[str], render: Callable[[list[int]], str]) -> str:
    """The stop string that ended `result` ("" when none did): the tokens that spelled it are in result.tokens but
    not in result.text, so the rendered tokens continue the text with it (the first of `stops` that does, as
    llama-server picks among stop strings found at one place)."""
    full = render(result.tokens)
    if result.finish_reason != "stop" or not full.startswith(result.text):
        return ""
    rest = full[len(result.text):]
    return next((s for s in stops if rest.startswith(s)), "")


class TimingsSoFar:
    """llama-server's timings of a stream so far (timings_per_token): the prompt's side once it is evaluated
    (GenerationStream.prompt), the generation's measured here from the first piece on."""

    def __init__(self, stream: GenerationStream):
        self._stream = stream
        self._first: float | None = None

    def now(self) -> dict[str, float]:
        """At a piece: the timings with the tokens generated so far."""
        now = time.perf_counter()
        if self._first is None:
            self._first = now
        return prompt_timings(self._stream.prompt) | predicted_side(len(self._stream.tokens),
                                                                    (now - self._first) * 1e3)


class Reply(ABC):
    """The bodies of one request's response: `whole` for a plain response; `start`, `piece` (per text piece)
    and `end` give the chunks of a stream, `stream_end` the event after them. model_name: the name the response
    carries (the request's own); include_usage: the stream ends with the usage chunk. Every body carries
    llama-server's system_fingerprint (build_info.py)."""

    id_prefix = ""
    object = ""
    chunk_object = ""
    stream_end: str | None = DONE
    carries_verbose = False  # a whole body carries llama-server's `__verbose` when the request asks (OpenAI's shapes)

    def __init__(self, model_name: str, include_usage: bool = False):
        self.id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model_name
        self.include_usage = include_usage
        self._feed: LogprobFeed | None = None  # a stream's entries not sent yet; None: no logprobs

    @abstractmethod
    def whole(self, result: GenerationResult) -> dict[str, Any]: ...

    def bind(self, task: SlotTask) -> None:
        """Called once a slot runs the request: `task` says which, with what parameters, and streams its tokens
        (and their logprobs entries, when asked for)."""
        if task.stream.logprobs is not None:
            self._feed = LogprobFeed(task.stream)

    def _new_logprobs(self) -> list[TokenLogprob] | None:
        """The entries of the tokens consumed since the last call (None: the request asked for no logprobs)."""
        return self._feed.take() if self._feed is not None else None

    def start(self) -> list[dict[str, Any]]:
        return []

    def event(self, chunk: dict[str, Any]) -> str:
        """A stream chunk as its server-sent event."""
        return sse(chunk)

    def error_event(self, error: APIError) -> str:
        """The event that ends a stream cut short by `error` (the headers are out: no status can say it)."""
        return sse(error.body())

    @abstractmethod
    def piece(self, text: str) -> list[dict[str, Any]]: ...

    def progress(self, progress: PromptProgress) -> list[dict[str, Any]]:
        """The chunks that tell how far the prompt has come (llama-server's prompt_progress, asked for with
        return_progress); none where the API has no such event (Anthropic's)."""
        return []

    def end(self, result: GenerationResult) -> list[dict[str, Any]]:
        """The last chunks of a stream: the finish chunk(s), then with include_usage the usage chunk, which then
        carries the timings (llama-server puts them on a stream's last chunk)."""
        chunks = self._finish(result)
        if self.include_usage:
            last = {"id": self.id, "object": self.chunk_object, "created": self.created, "model": self.model,
                    "system_fingerprint": BUILD_INFO, "choices": [], "usage": usage(result.metrics)}
            if chunks and "timings" in chunks[-1]:
                last["timings"] = chunks[-1].pop("timings")
            chunks.append(last)
        return chunks

    @abstractmethod
    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        """The chunks that end the text, the last one with the finish_reason and the timings."""

    def _whole(self, choice: dict[str, Any], result: GenerationResult) -> dict[str, Any]:
        """A whole response: one choice, the usage and the timings."""
        return self._body(self.object, choice, result) | {"usage": usage(result.metrics)}

    def _body(self, object: str, choice: dict[str, Any], result: GenerationResult | None = None) -> dict[str, Any]:
        """A body with one choice (and the timings of `result`)."""
        body = {"id": self.id, "object": object, "created": self.created, "model": self.model,
                "system_fingerprint": BUILD_INFO, "choices": [{"index": 0, **choice}]}
        if result is not None:
            body["timings"] = timings(result.metrics)
        return body
