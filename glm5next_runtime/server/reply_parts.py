"""The parts of an assistant reply in the order the text makes them: the reasoning (when the prompt opened a think
block: the text up to </think>), then the text, and with tools each call (GLM's call markup read by
../tool_calls.py's ToolCallSplitter, as chat completions reads it) between the texts around it. Anthropic's content
blocks and OpenAI Responses' output items are these parts; a stream opens a part with its first text, grows it, and
closes it when the next one opens or the reply ends; a call's part opens, gets its arguments (JSON) as one delta and
closes as soon as its markup closes. A part that would be empty is never opened; with tools a text part neither
starts nor ends with whitespace (GLM writes newlines around its calls; chat completions strips its content then),
so whitespace is held back until text follows it. Without parallel calls (tool_replies.ToolCalls) the
calls after the first are dropped, as chat completions drops them."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from ..chat import ReasoningSplitter
from ..tool_calls import ToolCall, ToolCallSplitter
from .tool_replies import ToolCalls

Kind = Literal["reasoning", "text", "tool_call"]


@dataclass
class Part:
    """One part: its kind, its place among the reply's parts, its text so far (a call's: its arguments as JSON),
    the call (tool_call parts), and a random id the APIs name its block or item by."""
    kind: Kind
    index: int
    text: str = ""
    call: ToolCall | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


class Change(NamedTuple):
    """What a piece of text did: opened `part` ("start"), added `text` to it ("delta"), or closed it ("stop")."""
    what: Literal["start", "delta", "stop"]
    part: Part
    text: str = ""


class Parts:
    """A reply's parts as its text comes (`feed`), then at its end (`close`). reasoning: the reply starts inside a
    think block; tools: the content is read for calls (None: the request has no tools). `done` holds the closed
    parts, in order; n_calls counts the tool_call parts."""

    def __init__(self, reasoning: bool, tools: ToolCalls | None = None):
        self._splitter = ReasoningSplitter() if reasoning else None
        self._calls = ToolCallSplitter(tools.schemas) if tools is not None else None
        self._parallel = tools is None or tools.parallel
        self._blank = ""  # with tools: whitespace held back until text follows it
        self.done: list[Part] = []
        self._open: Part | None = None
        self.n_calls = 0

    def feed(self, text: str) -> list[Change]:
        reasoning, content = self._splitter.feed(text) if self._splitter is not None else ("", text)
        return self._add("reasoning", reasoning) + self._content(content)

    def close(self) -> list[Change]:
        """At the end of the reply: the held-back tails (reasoning; content an unclosed call included), then the
        last part closed."""
        tail = self._add("reasoning", self._splitter.flush()[0]) if self._splitter is not None else []
        if self._calls is not None:
            tail += self._content("", final=True)
        return tail + self._close()

    def _content(self, text: str, final: bool = False) -> list[Change]:
        if self._calls is None:
            return self._add("text", text)
        return [c for piece in self._calls.segments(text, final)
                for c in (self._call(piece) if isinstance(piece, ToolCall) else self._text(piece))]

    def _text(self, text: str) -> list[Change]:
        """Content with tools: no whitespace at a text part's start or (held back) at its end."""
        held = self._blank + text
        if self._open is None or self._open.kind != "text":
            held = held.lstrip()
        body = held.rstrip()
        self._blank = held[len(body):]
        return self._add("text", body)

    def _call(self, call: ToolCall) -> list[Change]:
        self._blank = ""
        if self.n_calls and not self._parallel:
            return []
        self.n_calls += 1
        changes = self._close()
        part = Part("tool_call", len(self.done), json.dumps(call.arguments, ensure_ascii=False), call)
        self.done.append(part)
        return changes + [Change("start", part), Change("delta", part, part.text), Change("stop", part)]

    def _add(self, kind: Kind, text: str) -> list[Change]:
        if not text:
            return []
        changes = []
        if self._open is None or self._open.kind != kind:
            changes = self._close()
            self._open = Part(kind, len(self.done))
            changes.append(Change("start", self._open))
        self._open.text += text
        return changes + [Change("delta", self._open, text)]

    def _close(self) -> list[Change]:
        if self._open is None:
            return []
        part, self._open = self._open, None
        self.done.append(part)
        return [Change("stop", part)]


def whole_parts(text: str, reasoning: bool, tools: ToolCalls | None = None) -> list[Part]:
    """The parts of a whole reply."""
    parts = Parts(reasoning, tools)
    parts.feed(text)
    parts.close()
    return parts.done
