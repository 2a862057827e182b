"""GLM's tool-call markup: the text a GLM-4.5-and-later model writes to call a function, read back into calls, and
the tool description a chat template without tool support is given instead.

A call, as the GLM templates render it in the history and the model writes it:

    <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>

with optional newlines between the parts (GLM-4.5 writes them, later models do not). A VALUE is the text of a
string argument as it is, and JSON for any other (the templates render `v | tojson` unless v is a string); which
one is read from the parameter's JSON schema (read_argument), as vLLM's and SGLang's GLM parsers read it, and also
for the schemas they miss: a parameter that may be a string (`"string"`, `["string", "null"]`, an `anyOf` / `oneOf`
with a string branch) stays text (`null` is None where null is allowed), an enum's value is one of its members, any
other is JSON of its type, and a value that is not of its type stays text. Several calls may follow each other;
text around them is the reply's content. A call that does not parse (no name, a key without a value, a nested
<tool_call>) stays in the content as it was written: a model's malformed output is shown, never a crash.

A tag is markup only where the call's structure puts it (issue 51): a VALUE may hold the markup's own tags (code that
edits a parser or a template, a test of this module), which GLM-4.7/5.x write as the same single tokens. So a
</arg_value> ends a VALUE only where <arg_key> or </tool_call> follows it, and of the readings of a call that the
text allows, the first one after which the reply ends or the next <tool_call> begins is taken (the first reading at
all where none does: text after a call is content). A call is therefore final only once what follows it is known:
the next call's tag, or the reply's end (ToolCallSplitter.flush).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CALL_OPEN, CALL_CLOSE, VALUE_CLOSE = "<tool_call>", "</tool_call>", "</arg_value>"
_NAME = re.compile(r"\s*([^\s<]+)")
_ARG_HEAD = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>", re.S)  # then the VALUE
_CALL_END = re.compile(r"\s*</tool_call>")
_AFTER_VALUE = re.compile(r"\s*(?:<arg_key>|</tool_call>)")  # what makes a </arg_value> the VALUE's end
_NEXT_CALL = re.compile(r"\s*<tool_call>")
# The readings of one call tried before the first is taken: each is a choice of which </arg_value> ends each VALUE,
# so a text full of them could have exponentially many (a model's output, not an attacker's, but bounded anyway).
_MAX_READINGS = 64


@dataclass(frozen=True)
class ToolCall:
    """One call: the function's name and its arguments (JSON values)."""
    name: str
    arguments: dict[str, Any]


ArgumentSchemas = Mapping[str, Mapping[str, Any]]  # per function name: per parameter, its JSON schema

_JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})


def argument_schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per function name (OpenAI's tools list: {"type": "function", "function": {"name", "parameters"}}), the
    JSON schemas of its parameters (`parameters.properties`); what is not a mapping is left out."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function") or {}
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[fn.get("name", "")] = {k: v for k, v in props.items() if isinstance(v, Mapping)}
    return out


def schema_types(schema: Mapping[str, Any]) -> frozenset[str] | None:
    """The JSON types a parameter's schema admits: its "type" (a name or a list of names), the types of its "enum"
    or "const" values, the union over its "anyOf" / "oneOf" branches; None when it does not say (no type, a "$ref",
    a branch that does not say)."""
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    for values in ([schema["const"]] if "const" in schema else [], schema.get("enum") or []):
        types.update(_type_of(v) for v in values)
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            branch_types = schema_types(branch) if isinstance(branch, Mapping) else None
            if branch_types is None:
                return None
            types |= branch_types
    types &= _JSON_TYPES
    return frozenset(types) if types else None


def read_argument(text: str, schema: Mapping[str, Any] | None) -> Any:
    """An <arg_value>'s text as the value of a parameter of `schema` (None: a parameter the tool does not declare):
    - an enum's (or const's) member that the text names: as written when it is a string member, else as JSON;
    - `null` where null is admitted: None (the templates render None with tojson);
    - a parameter that admits a string: the text as it is;
    - any other: the text parsed as JSON (Python's True / False too for a boolean, as models may write them; an
      integral number for an integer) when that is of an admitted type, else the text;
    - a schema that says no type (schema_types is None): JSON when the text parses, else the text."""
    types = schema_types(schema) if schema is not None else None
    if types is None:
        return _json_or_text(text)
    members = schema_members(schema)
    if text in members:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        value = {"True": True, "False": False}.get(text.strip(), text) if "boolean" in types else text
    if any(_type_of(m) == _type_of(value) and m == value for m in members):  # (in Python True == 1)
        return value
    if "null" in types and value is None:
        return None
    if "string" in types:
        return text
    if isinstance(value, float) and value.is_integer() and "integer" in types and "number" not in types:
        value = int(value)
    admitted = _type_of(value) in types or (_type_of(value) == "integer" and "number" in types)
    return value if admitted else text


def schema_members(schema: Mapping[str, Any]) -> list[Any]:
    """The values an "enum" or "const" schema admits ([] for any other)."""
    return [schema["const"]] if "const" in schema else list(schema.get("enum") or [])


def _type_of(value: Any) -> str:
    """The JSON type name of a parsed JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


@dataclass(frozen=True)
class _Reading:
    """One reading of a call's markup: where it ends (past its </tool_call>), its name and (key, VALUE text) pairs."""
    end: int
    name: str
    args: tuple[tuple[str, str], ...]


def _readings(text: str, at: int) -> Iterator[_Reading]:
    """Every reading of text[at:] (just past a <tool_call>) as one call, the ones whose VALUEs end at their first
    possible </arg_value> first."""
    name = _NAME.match(text, at)
    if name is not None:
        yield from _arguments(text, name.end(), name.group(1), ())


def _arguments(text: str, at: int, name: str, args: tuple[tuple[str, str], ...]) -> Iterator[_Reading]:
    if (end := _CALL_END.match(text, at)) is not None:
        yield _Reading(end.end(), name, args)
    head = _ARG_HEAD.match(text, at)
    if head is None:
        return
    key, start = head.group(1).strip(), head.end()
    close = text.find(VALUE_CLOSE, start)
    while close >= 0:
        after = close + len(VALUE_CLOSE)
        if _AFTER_VALUE.match(text, after):
            yield from _arguments(text, after, name, args + ((key, text[start:close]),))
        close = text.find(VALUE_CLOSE, after)


def _ends_calls(text: str, at: int, final: bool) -> bool | None:
    """Whether text[at:] is what may follow a reply's call (the next <tool_call>, or nothing more when `final`);
    None while it is not known yet (blank so far, or the start of a <tool_call>)."""
    if _NEXT_CALL.match(text, at):
        return True
    rest = text[at:].lstrip()
    if not rest:
        return True if final else None
    return None if not final and CALL_OPEN.startswith(rest) else False


def _call_of(reading: _Reading, schemas: ArgumentSchemas) -> ToolCall:
    params = schemas.get(reading.name, {})
    return ToolCall(reading.name, {key: read_argument(value, params.get(key)) for key, value in reading.args})


def read_call(text: str, schemas: ArgumentSchemas, final: bool) -> tuple[int, ToolCall | None] | None:
    """The call `text` begins with (at its <tool_call>, module docstring), once decided: (where it ends, the call),
    or (where the markup that is no call ends: past its first </tool_call>, or all of it, None); None while the text
    so far leaves it open (not `final`: the reply goes on). schemas: argument_schemas of the request's tools."""
    first = None
    for n, reading in enumerate(_readings(text, len(CALL_OPEN))):
        first = first or reading
        ends = _ends_calls(text, reading.end, final)
        if ends is None:
            return None
        if ends:
            return reading.end, _call_of(reading, schemas)
        if n + 1 == _MAX_READINGS:
            break
    if not final:
        return None
    if first is not None:
        return first.end, _call_of(first, schemas)
    close = text.find(CALL_CLOSE)
    return (close + len(CALL_CLOSE) if close >= 0 else len(text)), None


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


class ToolCallSplitter:
    """Streams a reply's content: text outside <tool_call>...</tool_call> is content, each call becomes a ToolCall
    once it is decided (read_call: the next call's tag follows it, or the reply ends). A tail that may still grow
    into <tool_call> is held back until it is decided, and a call is held until it is (so no piece of the markup
    leaks into the content)."""

    def __init__(self, schemas: ArgumentSchemas):
        """schemas: argument_schemas of the request's tools."""
        self._schemas = schemas
        self._pending = ""

    def feed(self, text: str) -> tuple[str, list[ToolCall]]:
        """Add a piece of content; returns the content that became final and the calls that were decided."""
        return _content_and_calls(self.segments(text))

    def segments(self, text: str, final: bool = False) -> list[str | ToolCall]:
        """As feed, in the reply's order: the content that became final and the decided calls as they alternate (no
        empty strings). final: the reply ends after `text` (what flush does)."""
        self._pending += text
        out: list[str | ToolCall] = []
        while (start := self._pending.find(CALL_OPEN)) >= 0:
            out.append(self._pending[:start])
            self._pending = self._pending[start:]
            # every reading ends at a </tool_call>: until one is written, a streamed call is not parsed again for
            # each token (a long argument would cost its length per token)
            decided = read_call(self._pending, self._schemas, final) if final or CALL_CLOSE in self._pending else None
            if decided is None:
                return [p for p in out if p != ""]
            end, call = decided
            out.append(call if call is not None else self._pending[:end])
            self._pending = self._pending[end:]
        keep = 0 if final else _partial_suffix(self._pending, CALL_OPEN)
        out.append(self._pending[:len(self._pending) - keep])
        self._pending = self._pending[len(self._pending) - keep:]
        return [p for p in out if p != ""]

    def flush(self) -> tuple[str, list[ToolCall]]:
        """At the end of the reply: the calls it decides and the rest of the content (an unclosed call included)."""
        return _content_and_calls(self.segments("", final=True))


def _content_and_calls(pieces: list[str | ToolCall]) -> tuple[str, list[ToolCall]]:
    return "".join(p for p in pieces if isinstance(p, str)), [p for p in pieces if isinstance(p, ToolCall)]


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `tag`."""
    return next((n for n in range(min(len(text), len(tag) - 1), 0, -1) if tag.startswith(text[-n:])), 0)


def split_tool_calls(text: str, schemas: ArgumentSchemas) -> tuple[str, list[ToolCall]]:
    """(content, calls) of a whole reply's content; schemas: argument_schemas of the request's tools."""
    return _content_and_calls(ToolCallSplitter(schemas).segments(text, final=True))


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
