"""Response bodies of /v1/completions and /v1/chat/completions (OpenAI's shapes, llama-server's extras) and their
server-sent-event framing. A response carries usage and llama-server's `timings`; a stream carries the usage only
when asked (stream_options.include_usage), as OpenAI does: in a last chunk with `choices: []`, and the timings on its
last chunk, as llama-server does (the finish chunk, or that usage chunk). Token log-probabilities, when asked for, are in each choice's `logprobs` (logprobs.py): a
stream chunk carries those of the tokens consumed since the last chunk that carried some, the finish chunk the
rest."""
from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any

from ..chat import ReasoningSplitter, split_reasoning
from ..generate import GenerationResult, GenerationStream, PromptProgress, TokenLogprob
from .build_info import BUILD_INFO
from .errors import APIError
from .logprobs import LogprobFeed, TokenPieces, chat_logprobs, completion_logprobs
from .slot_tasks import SlotTask
from .tool_replies import StreamedCalls, ToolCalls, finish_reason, whole_message

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


class CompletionReply(Reply):
    """POST /v1/completions. pieces: how tokens are shown in logprobs."""

    id_prefix = "cmpl"
    object = chunk_object = "text_completion"

    def __init__(self, model_name: str, pieces: TokenPieces, include_usage: bool = False):
        super().__init__(model_name, include_usage)
        self._pieces = pieces
        self._text_offset = 0  # characters of the tokens whose logprobs were sent

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        return self._whole(self._choice(result.text, result.finish_reason, result.logprobs), result)

    def piece(self, text: str) -> list[dict[str, Any]]:
        return [self._body(self.chunk_object, self._choice(text, None, self._new_logprobs()))]

    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        return [self._body(self.chunk_object, self._choice("", result.finish_reason, self._new_logprobs()), result)]

    def progress(self, progress: PromptProgress) -> list[dict[str, Any]]:
        chunk = self._body(self.chunk_object, {"text": "", "logprobs": None, "finish_reason": None})
        return [chunk | {"prompt_progress": progress._asdict()}]

    def _choice(self, text: str, finish_reason: str | None,
                entries: list[TokenLogprob] | None) -> dict[str, Any]:
        logprobs = None
        if entries is not None:
            logprobs = completion_logprobs(entries, self._pieces, self._text_offset)
            self._text_offset += sum(map(len, logprobs["tokens"]))
        return {"text": text, "logprobs": logprobs, "finish_reason": finish_reason}


class ChatReply(Reply):
    """POST /v1/chat/completions. With `reasoning` (the prompt opened a think block) the reply's text up to
    </think> is reasoning_content and the rest content; a stream sends the reasoning deltas, then the content
    deltas. pieces: how tokens are shown in logprobs."""

    id_prefix = "chatcmpl"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def __init__(self, model_name: str, pieces: TokenPieces, reasoning: bool, include_usage: bool = False,
                 tools: ToolCalls | None = None):
        """tools: read the reply's content for tool calls (tool_replies.py); None: the request has no tools."""
        super().__init__(model_name, include_usage)
        self._pieces = pieces
        self._splitter = ReasoningSplitter() if reasoning else None
        self._tools = tools
        self._calls = StreamedCalls(tools) if tools is not None else None

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": result.text}
        if self._splitter is not None:
            message["reasoning_content"], message["content"] = split_reasoning(result.text)
        calls: list[dict[str, Any]] = []
        if self._tools is not None:
            message["content"], calls = whole_message(message["content"], self._tools)
            if calls:
                message["tool_calls"] = calls
        return self._whole({"message": message, "logprobs": self._logprobs(result.logprobs),
                            "finish_reason": finish_reason(result.finish_reason, len(calls))}, result)

    def start(self) -> list[dict[str, Any]]:
        return [self._delta({"role": "assistant", "content": None})]

    def progress(self, progress: PromptProgress) -> list[dict[str, Any]]:
        # llama-server's progress chunk: the opening delta again, with the progress
        return [self._delta({"role": "assistant", "content": None}) | {"prompt_progress": progress._asdict()}]

    def piece(self, text: str) -> list[dict[str, Any]]:
        if self._splitter is None and self._calls is None:
            return self._with_logprobs([self._delta({"content": text})])
        # text held back by the splitter makes no chunk: its tokens' logprobs go with the next one
        parts = self._splitter.feed(text) if self._splitter is not None else ("", text)
        return self._with_logprobs(self._split_deltas(*parts))

    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        tail = self._split_deltas(*self._splitter.flush()) if self._splitter is not None else []
        if self._calls is not None and (rest := self._calls.flush()):
            tail.append(self._delta({"content": rest}))
        n_calls = self._calls.n_calls if self._calls is not None else 0
        return tail + self._with_logprobs([self._delta({}, finish_reason(result.finish_reason, n_calls), result)])

    def _with_logprobs(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`chunks`, the last one carrying the logprobs of the tokens consumed since the last chunk that did."""
        if chunks and self._feed is not None:
            chunks[-1]["choices"][0]["logprobs"] = self._logprobs(self._new_logprobs())
        return chunks

    def _logprobs(self, entries: list[TokenLogprob] | None) -> dict[str, Any] | None:
        return None if entries is None else chat_logprobs(entries, self._pieces)

    def _split_deltas(self, reasoning: str, content: str) -> list[dict[str, Any]]:
        out = [self._delta({"reasoning_content": reasoning})] if reasoning else []
        calls: list[dict[str, Any]] = []
        if self._calls is not None and content:
            content, calls = self._calls.feed(content)
        out += [self._delta({"content": content})] if content else []
        return out + ([self._delta({"tool_calls": calls})] if calls else [])

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None,
               result: GenerationResult | None = None) -> dict[str, Any]:
        return self._body(self.chunk_object, {"delta": delta, "logprobs": None, "finish_reason": finish_reason},
                          result)
