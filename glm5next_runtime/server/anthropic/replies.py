"""Responses of Anthropic's Messages API: the message object, its stream of typed events, and Anthropic's error
shape.

A message's content is a thinking block (when the prompt opened a think block and the reply reasons; its
`signature` is empty: nothing signs it here) and then a text block, each present when it has text (llama-server's
rule), and with tools a tool_use block per call ({"type": "tool_use", "id": "toolu_...", "name", "input"}) where
the reply makes it (../reply_parts.py). stop_reason: tool_use (the reply made calls and ended by itself or at a stop
sequence, as llama-server), end_turn (end of generation), stop_sequence (with the string in stop_sequence) or
max_tokens (the limit or the context). usage, as llama-server and Anthropic count it: input_tokens are the prompt tokens
evaluated, cache_read_input_tokens those resumed from the slot's prompt cache.

A stream: message_start (usage: the prompt's size; cached tokens are known at the end), ping, then per block
content_block_start, content_block_delta (thinking_delta / text_delta / input_json_delta: a tool_use block starts
with an empty input and gets its whole input as one partial_json; a thinking block ends with a signature_delta, as
llama-server sends it), content_block_stop, then message_delta (stop_reason, stop_sequence, the
final usage) and message_stop; every event named by its type (`event: ...`). A stream cut short ends with an
`error` event.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ...generate import GenerationResult
from ..errors import APIError
from ..reply_parts import Change, Part, Parts, whole_parts
from ..replies import Reply, stopping_word, typed_sse
from ..slot_tasks import SlotTask
from ..tool_replies import ToolCalls

# Anthropic's error types by HTTP status (docs.anthropic.com, Errors); any other status is an api_error
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def anthropic_error(error: APIError) -> dict[str, Any]:
    """`error` in Anthropic's shape. A prompt too long for the context says so in Anthropic's words ("prompt is too
    long: N tokens > M maximum"), which clients such as Claude Code read to compact the conversation."""
    message = error.message
    if error.type == "exceed_context_size_error":
        message = f"prompt is too long: {error.extra['n_prompt_tokens']} tokens > {error.extra['n_ctx']} maximum"
    return {"type": "error", "error": {"type": ERROR_TYPES.get(error.status, "api_error"), "message": message}}


class AnthropicReply(Reply):
    """POST /v1/messages. reasoning: the prompt opened a think block; stops: the request's stop_sequences; render:
    token ids -> text as the generation shows them (to tell which stop sequence ended it); tools: the reply is read
    for calls (None: the request has no tools)."""

    stream_end = None

    def __init__(self, model_name: str, reasoning: bool, stops: Sequence[str], render: Callable[[list[int]], str],
                 tools: ToolCalls | None = None):
        super().__init__(model_name)
        self.id = f"msg_{uuid.uuid4().hex}"
        self._reasoning = reasoning
        self._tools = tools
        self._parts = Parts(reasoning, tools)
        self._stops = tuple(stops)
        self._render = render
        self._n_prompt = 0

    def bind(self, task: SlotTask) -> None:
        self._n_prompt = task.n_prompt_tokens

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        parts = whole_parts(result.text, self._reasoning, self._tools)
        return self._message([block(p, p.text) for p in parts], result, called(parts))

    def event(self, chunk: dict[str, Any]) -> str:
        return typed_sse(chunk)

    def error_event(self, error: APIError) -> str:
        return typed_sse(anthropic_error(error))

    def start(self) -> list[dict[str, Any]]:
        return [{"type": "message_start", "message": self._message([], None)}, {"type": "ping"}]

    def piece(self, text: str) -> list[dict[str, Any]]:
        return [e for change in self._parts.feed(text) for e in events(change)]

    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        changes = self._parts.close()
        reason, sequence = self._stop(result, called(self._parts.done))
        return [e for change in changes for e in events(change)] + [
            {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
             "usage": self._usage(result)},
            {"type": "message_stop"}]

    def _message(self, content: list[dict[str, Any]], result: GenerationResult | None,
                 calls: bool = False) -> dict[str, Any]:
        """The message object: whole (with `result`; calls: the content has tool_use blocks) or as message_start
        opens it."""
        reason, sequence = self._stop(result, calls) if result is not None else (None, None)
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": reason, "stop_sequence": sequence, "usage": self._usage(result)}

    def _stop(self, result: GenerationResult, calls: bool) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence) of a finished generation (calls: it made tool calls)."""
        if result.finish_reason == "length":
            return "max_tokens", None
        if calls:
            return "tool_use", None
        word = stopping_word(result, self._stops, self._render)
        return ("stop_sequence", word) if word else ("end_turn", None)

    def _usage(self, result: GenerationResult | None) -> dict[str, int]:
        if result is None:  # message_start: the prompt's size; how much of it the cache held is known at the end
            return {"input_tokens": self._n_prompt, "cache_read_input_tokens": 0, "output_tokens": 0}
        m = result.metrics
        return {"input_tokens": m["n_prompt_tokens"] - m["n_cached_tokens"],
                "cache_read_input_tokens": m["n_cached_tokens"], "output_tokens": m["n_generated"]}


def called(parts: list[Part]) -> bool:
    """Whether a reply's parts have a tool call."""
    return any(p.kind == "tool_call" for p in parts)


def block(part: Part, text: str) -> dict[str, Any]:
    """A content block of `part` holding `text` (a tool_use block's: its input as JSON, "" for none yet)."""
    if part.kind == "reasoning":
        return {"type": "thinking", "thinking": text, "signature": ""}
    if part.kind == "tool_call":
        return {"type": "tool_use", "id": f"toolu_{part.id[:24]}", "name": part.call.name,
                "input": json.loads(text) if text else {}}
    return {"type": "text", "text": text}


DELTAS = {"reasoning": ("thinking_delta", "thinking"), "text": ("text_delta", "text"),
          "tool_call": ("input_json_delta", "partial_json")}


def events(change: Change) -> list[dict[str, Any]]:
    """The stream events of one change of the reply's parts."""
    index = change.part.index
    if change.what == "start":
        return [{"type": "content_block_start", "index": index, "content_block": block(change.part, "")}]
    if change.what == "delta":
        kind, field = DELTAS[change.part.kind]
        return [{"type": "content_block_delta", "index": index, "delta": {"type": kind, field: change.text}}]
    signature = ([{"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta",
                                                                              "signature": ""}}]
                 if change.part.kind == "reasoning" else [])
    return signature + [{"type": "content_block_stop", "index": index}]
