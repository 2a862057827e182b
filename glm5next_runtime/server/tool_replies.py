"""A chat reply's tool calls in OpenAI's shape: the content of the reply is read for GLM's call markup
(../tool_calls.py); each call becomes an entry of `message.tool_calls` ({"id", "type": "function", "function":
{"name", "arguments": JSON text}}), or in a stream one `delta.tool_calls` entry with its `index`, sent whole once
its markup closes. A reply that made a call finishes with "tool_calls" (unless it was cut at the token limit)."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from ..tool_calls import ArgumentSchemas, ToolCall, ToolCallSplitter, split_tool_calls


@dataclass(frozen=True)
class ToolCalls:
    """How a request's replies are read for calls. schemas: tool_calls.argument_schemas of its tools; parallel:
    several calls may be returned (false: the first only, OpenAI's parallel_tool_calls)."""
    schemas: ArgumentSchemas
    parallel: bool = True


def openai_call(call: ToolCall) -> dict[str, Any]:
    """One entry of OpenAI's tool_calls."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}


def finish_reason(reason: str, n_calls: int) -> str:
    """"tool_calls" for a reply that ended by itself after making calls; `reason` otherwise."""
    return "tool_calls" if n_calls and reason == "stop" else reason


def whole_message(content: str, tools: ToolCalls) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of a whole reply's content: null content when only calls were made."""
    text, calls = split_tool_calls(content, tools.schemas)
    calls = calls if tools.parallel else calls[:1]
    return (text.strip() or None) if calls else text, [openai_call(c) for c in calls]


class StreamedCalls:
    """A stream's content read for calls: `feed` and `flush` return the content to send and the delta.tool_calls
    entries of the calls that completed."""

    def __init__(self, tools: ToolCalls):
        self._tools = tools
        self._splitter = ToolCallSplitter(tools.schemas)
        self.n_calls = 0

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        content, calls = self._splitter.feed(text)
        return content, self._entries(calls)

    def flush(self) -> tuple[str, list[dict[str, Any]]]:
        """At the reply's end: the rest of the content and the entries of the calls that end it."""
        content, calls = self._splitter.flush()
        return content, self._entries(calls)

    def _entries(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        out = []
        for call in calls:
            if self.n_calls and not self._tools.parallel:
                break
            out.append({"index": self.n_calls, **openai_call(call)})
            self.n_calls += 1
        return out
