"""Response bodies of /v1/completions and /v1/chat/completions (OpenAI's shapes, llama-server's extras: usage and
`timings` in every response, in the last chunk of a stream) and their server-sent-event framing."""
from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any

from ..chat import ReasoningSplitter, split_reasoning
from ..generate import GenerationResult

DONE = "data: [DONE]\n\n"


def sse(data: dict[str, Any]) -> str:
    """One server-sent event in OpenAI's framing."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def usage(m: dict) -> dict[str, Any]:
    """OpenAI's usage from GenerationResult.metrics (prompt_tokens_details.cached_tokens: resumed from the slot's
    prompt cache, as OpenAI and llama-server report it)."""
    return {"prompt_tokens": m["n_prompt_tokens"], "completion_tokens": m["n_generated"],
            "total_tokens": m["n_prompt_tokens"] + m["n_generated"],
            "prompt_tokens_details": {"cached_tokens": m["n_cached_tokens"]}}


def timings(m: dict) -> dict[str, float]:
    """llama-server's timings from GenerationResult.metrics: cache_n prompt tokens resumed from the slot's cache,
    prompt_n evaluated (draft_n: drafted tokens, draft_n_accepted: accepted)."""
    cache_n, predicted_n = m["n_cached_tokens"], m["n_generated"]
    prompt_n = m["n_prompt_tokens"] - cache_n
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": m["prompt_ms"],
        "prompt_per_token_ms": m["prompt_ms"] / prompt_n if prompt_n else 0.0,
        "prompt_per_second": m["prompt_tokens_per_s"],
        "predicted_n": predicted_n,
        "predicted_ms": m["decode_ms"],
        "predicted_per_token_ms": m["decode_ms"] / predicted_n if predicted_n else 0.0,
        "predicted_per_second": m["decode_tokens_per_s"],
        "draft_n": m["n_drafted"],
        "draft_n_accepted": m["n_accepted"],
    }


class Reply(ABC):
    """The bodies of one request's response: `whole` for a plain response; `start`, `piece` (per text piece)
    and `end` give the chunks of a stream."""

    id_prefix = ""
    object = ""
    chunk_object = ""

    def __init__(self, model_name: str):
        self.id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model_name

    @abstractmethod
    def whole(self, result: GenerationResult) -> dict[str, Any]: ...

    def start(self) -> list[dict[str, Any]]:
        return []

    @abstractmethod
    def piece(self, text: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    def end(self, result: GenerationResult) -> list[dict[str, Any]]: ...

    def _body(self, object: str, choice: dict[str, Any], result: GenerationResult | None = None) -> dict[str, Any]:
        body = {"id": self.id, "object": object, "created": self.created, "model": self.model,
                "choices": [{"index": 0, **choice}]}
        if result is not None:
            body |= {"usage": usage(result.metrics), "timings": timings(result.metrics)}
        return body


class CompletionReply(Reply):
    """POST /v1/completions."""

    id_prefix = "cmpl"
    object = chunk_object = "text_completion"

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        return self._body(self.object, self._choice(result.text, result.finish_reason), result)

    def piece(self, text: str) -> list[dict[str, Any]]:
        return [self._body(self.chunk_object, self._choice(text, None))]

    def end(self, result: GenerationResult) -> list[dict[str, Any]]:
        return [self._body(self.chunk_object, self._choice("", result.finish_reason), result)]

    @staticmethod
    def _choice(text: str, finish_reason: str | None) -> dict[str, Any]:
        return {"text": text, "logprobs": None, "finish_reason": finish_reason}


class ChatReply(Reply):
    """POST /v1/chat/completions. With `reasoning` (the prompt opened a think block) the reply's text up to
    </think> is reasoning_content and the rest content; a stream sends the reasoning deltas, then the content
    deltas."""

    id_prefix = "chatcmpl"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def __init__(self, model_name: str, reasoning: bool):
        super().__init__(model_name)
        self._splitter = ReasoningSplitter() if reasoning else None

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": result.text}
        if self._splitter is not None:
            message["reasoning_content"], message["content"] = split_reasoning(result.text)
        return self._body(self.object, {"message": message, "logprobs": None,
                                        "finish_reason": result.finish_reason}, result)

    def start(self) -> list[dict[str, Any]]:
        return [self._delta({"role": "assistant", "content": None})]

    def piece(self, text: str) -> list[dict[str, Any]]:
        if self._splitter is None:
            return [self._delta({"content": text})]
        return self._split_deltas(*self._splitter.feed(text))

    def end(self, result: GenerationResult) -> list[dict[str, Any]]:
        tail = self._split_deltas(*self._splitter.flush()) if self._splitter is not None else []
        return tail + [self._delta({}, result.finish_reason, result)]

    def _split_deltas(self, reasoning: str, content: str) -> list[dict[str, Any]]:
        out = [self._delta({"reasoning_content": reasoning})] if reasoning else []
        return out + ([self._delta({"content": content})] if content else [])

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None,
               result: GenerationResult | None = None) -> dict[str, Any]:
        return self._body(self.chunk_object, {"delta": delta, "logprobs": None, "finish_reason": finish_reason},
                          result)
