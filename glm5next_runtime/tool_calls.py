"""GLM's tool-call markup: the text a GLM-4.5-and-later model writes to call a function, read back into calls, and
the tool description a chat template without tool support is given instead.

A call, as the GLM templates render it in the history and the model writes it:

    <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>

with optional newlines between the parts (GLM-4.5 writes them, later models do not). A VALUE is the text of a
string argument as it is, and JSON for any other (the templates render `v | tojson` unless v is a string); which
one is read from the tool's JSON schema (a parameter typed "string" stays text, any other is parsed as JSON when it
parses). Several calls may follow each other; text around them is the reply's content. A call that does not parse
(no name, a key without a value, a nested <tool_call>) stays in the content as it was written: a model's malformed
output is shown, never a crash.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_ARG = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)
_NAME = re.compile(r"\s*([^\s<]+)")


@dataclass(frozen=True)
class ToolCall:
    """One call: the function's name and its arguments (JSON values)."""
    name: str
    arguments: dict[str, Any]


def string_parameters(tools: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Per function name (OpenAI's tools list: {"type": "function", "function": {"name", "parameters"}}), the
    parameters its JSON schema types as "string" (their values are read as text, not JSON)."""
    out: dict[str, set[str]] = {}
    for tool in tools:
        fn = tool.get("function") or {}
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[fn.get("name", "")] = {k for k, v in props.items() if isinstance(v, Mapping) and v.get("type") == "string"}
    return out


def parse_call(body: str, strings: Mapping[str, set[str]]) -> ToolCall | None:
    """The call written between <tool_call> and </tool_call>, or None when `body` is not one (module docstring).
    strings: string_parameters of the request's tools."""
    name = _NAME.match(body)
    if name is None or CALL_OPEN in body:
        return None
    at, args = name.end(), {}
    text_params = strings.get(name.group(1), set())
    while (arg := _ARG.match(body, at)) is not None:
        key, value = arg.group(1).strip(), arg.group(2)
        args[key] = value if key in text_params else _json_or_text(value)
        at = arg.end()
    if body[at:].strip():  # something that is not an argument
        return None
    return ToolCall(name.group(1), args)


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


class ToolCallSplitter:
    """Streams a reply's content: text outside <tool_call>...</tool_call> is content, each complete call becomes
    a ToolCall. A tail that may still grow into <tool_call> is held back until it is decided, and a call is held
    until it closes (so no piece of the markup leaks into the content)."""

    def __init__(self, strings: Mapping[str, set[str]]):
        """strings: string_parameters of the request's tools."""
        self._strings = strings
        self._pending = ""

    def feed(self, text: str) -> tuple[str, list[ToolCall]]:
        """Add a piece of content; returns the content that became final and the calls that completed."""
        pieces = self.segments(text)
        return "".join(p for p in pieces if isinstance(p, str)), [p for p in pieces if isinstance(p, ToolCall)]

    def segments(self, text: str) -> list[str | ToolCall]:
        """As feed, in the reply's order: the content that became final and the completed calls as they
        alternate (no empty strings)."""
        self._pending += text
        out: list[str | ToolCall] = []
        while True:
            start = self._pending.find(CALL_OPEN)
            if start < 0:
                keep = _partial_suffix(self._pending, CALL_OPEN)
                out.append(self._pending[:len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep:]
                return [p for p in out if p != ""]
            end = self._pending.find(CALL_CLOSE, start)
            if end < 0:
                out.append(self._pending[:start])
                self._pending = self._pending[start:]
                return [p for p in out if p != ""]
            call = parse_call(self._pending[start + len(CALL_OPEN):end], self._strings)
            written = self._pending[start:end + len(CALL_CLOSE)]
            out += [self._pending[:start] + ("" if call else written)] + ([call] if call else [])
            self._pending = self._pending[end + len(CALL_CLOSE):]

    def flush(self) -> str:
        """At the end of the reply: the held-back rest (an unclosed call included) is content."""
        out, self._pending = self._pending, ""
        return out


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `tag`."""
    return next((n for n in range(min(len(text), len(tag) - 1), 0, -1) if tag.startswith(text[-n:])), 0)


def split_tool_calls(text: str, strings: Mapping[str, set[str]]) -> tuple[str, list[ToolCall]]:
    """(content, calls) of a whole reply's content."""
    splitter = ToolCallSplitter(strings)
    content, calls = splitter.feed(text)
    return content + splitter.flush(), calls


def tools_preamble(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tool description GLM's own templates put in the system turn, for a chat template that does not render
    `tools` itself: the functions' JSON signatures and the markup to call them with."""
    signatures = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            f"{signatures}\n</tools>\n\n"
            "For each function call, output the function name and arguments within the following XML format:\n"
            "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
            "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>")


def call_markup(name: str, arguments: Mapping[str, Any]) -> str:
    """A call as the model writes it (for a history rendered by a template without tool support)."""
    args = "".join(f"<arg_key>{k}</arg_key><arg_value>{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                   "</arg_value>" for k, v in arguments.items())
    return f"{CALL_OPEN}{name}{args}{CALL_CLOSE}"
