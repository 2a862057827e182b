"""GLM's tool-call markup read back into calls (glm5next_runtime/tool_calls.py) and a chat reply's tool_calls in
OpenAI's shape (server/tool_replies.py, server/openai_chat/replies.py ChatReply), on model-independent text: whole replies,
the same replies streamed in every split, GLM-4.5's and later spellings, malformed markup that stays content, and
arguments typed by their parameters' JSON schemas (a table over the schema kinds, whole and streamed)."""
from __future__ import annotations

import json
import random

import pytest

from glm5next_runtime.generate import GenerationResult
from glm5next_runtime.server.openai_chat.replies import ChatReply
from glm5next_runtime.server.tool_replies import ToolCalls
from glm5next_runtime.tool_calls import ToolCall, ToolCallSplitter, call_markup, split_tool_calls, argument_schemas

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "object"}}}}},
         {"type": "function", "function": {"name": "echo", "parameters": {"properties": {"text": {"type": "string"}}}}}]
SCHEMAS = argument_schemas(TOOLS)
TWO_CALLS = ("Let me check. <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
             "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call><tool_call>echo<arg_key>text</arg_key>"
             "<arg_value>42</arg_value></tool_call>")
WANT = [ToolCall("get_weather", {"city": "Paris", "days": 3}), ToolCall("echo", {"text": "42"})]


def test_calls_and_content_of_a_whole_reply():
    """A string parameter stays text ("42" for echo), any other is JSON (3 for days)."""
    assert split_tool_calls(TWO_CALLS, SCHEMAS) == ("Let me check. ", WANT)


def test_glm45_newlines_between_the_parts():
    text = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York</arg_value>\n<arg_key>units"
            "</arg_key>\n<arg_value>{\"temp\": \"C\"}</arg_value>\n</tool_call>")
    assert split_tool_calls(text, SCHEMAS) == ("", [ToolCall("get_weather", {"city": "New York",
                                                                             "units": {"temp": "C"}})])


def test_a_call_without_arguments_and_an_unknown_function():
    assert split_tool_calls("<tool_call>now</tool_call>", SCHEMAS) == ("", [ToolCall("now", {})])


@pytest.mark.parametrize("text", [
    "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",        # no name
    "<tool_call>f<arg_key>a</arg_key></tool_call>",                                 # a key without a value
    "<tool_call>f <tool_call>g</tool_call>",                                        # nested open
    "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value> trailing words</tool_call>",
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par",                  # cut off
])
def test_malformed_markup_stays_content(text):
    content, calls = split_tool_calls(text, SCHEMAS)
    assert content == text and calls == []


@pytest.mark.parametrize("seed", range(20))
def test_a_stream_split_anywhere_gives_the_whole_replys_calls(seed):
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(TWO_CALLS)), rng.randint(1, 30)))
    pieces = [TWO_CALLS[a:b] for a, b in zip([0] + cuts, cuts + [len(TWO_CALLS)])]
    splitter, content, calls = ToolCallSplitter(SCHEMAS), "", []
    for piece in pieces:
        text, done = splitter.feed(piece)
        assert "<" not in text  # no piece of the markup leaks into the content
        content, calls = content + text, calls + done
    assert calls == WANT[:1]  # the first call once the second's tag follows it; the last at the reply's end
    rest, last = splitter.flush()
    assert (content + rest, calls + last) == ("Let me check. ", WANT)


# A parameter per schema kind (issue 25, item 4), and what the model's text for it reads as: strings stay text,
# whatever else they look like; typed values are JSON of their type; a value that is not of its type stays text.
KINDS = {
    "string": {"type": "string"},
    "nullable": {"type": ["string", "null"]},
    "any_of": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "one_of": {"oneOf": [{"type": "string", "format": "date"}, {"type": "integer"}]},
    "str_enum": {"enum": ["fast", "slow", "1"]},
    "mixed_enum": {"enum": [1, 2, "auto"]},
    "int_enum": {"enum": [1, 2]},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "array": {"type": "array", "items": {"type": "string"}},
    "object": {"type": "object"},
    "int_or_null": {"type": ["integer", "null"]},
    "untyped": {"description": "anything"},
    "ref": {"$ref": "#/definitions/thing"},
}
TYPED_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": KINDS}}}]
TABLE = [  # (parameter, the text the model writes, the argument)
    ("string", "123", "123"), ("string", "true", "true"), ("string", '{"a": 1}', '{"a": 1}'),
    ("string", "null", "null"), ("string", " padded ", " padded "),
    ("nullable", "123", "123"), ("nullable", "true", "true"), ("nullable", "null", None), ("nullable", "x", "x"),
    ("any_of", "123", "123"), ("any_of", "false", "false"), ("any_of", "null", None),
    ("one_of", "2024-12-25", "2024-12-25"), ("one_of", "7", "7"),
    ("str_enum", "1", "1"), ("str_enum", "fast", "fast"),
    ("mixed_enum", "2", 2), ("mixed_enum", "auto", "auto"), ("mixed_enum", "true", "true"),
    ("int_enum", "true", "true"), ("int_enum", "1", 1),
    ("integer", "3", 3), ("integer", "3.0", 3), ("integer", "3.5", "3.5"), ("integer", "three", "three"),
    ("integer", "true", "true"), ("integer", '"3"', '"3"'),
    ("number", "2.5", 2.5), ("number", "2", 2), ("number", "1e3", 1000.0), ("number", "abc", "abc"),
    ("boolean", "true", True), ("boolean", "False", False), ("boolean", "1", "1"), ("boolean", "yes", "yes"),
    ("array", '["a", "b"]', ["a", "b"]), ("array", "a, b", "a, b"), ("array", '{"a": 1}', '{"a": 1}'),
    ("object", '{"a": [1, null]}', {"a": [1, None]}), ("object", "[1]", "[1]"), ("object", "{broken", "{broken"),
    ("int_or_null", "null", None), ("int_or_null", "4", 4), ("int_or_null", "four", "four"),
    ("untyped", "5", 5), ("untyped", "text", "text"), ("ref", "[1]", [1]),
    ("undeclared", "5", 5), ("undeclared", "words", "words"),
]


def table_reply() -> tuple[str, list[ToolCall]]:
    """Every row of TABLE as a call of its own, and the calls it reads as."""
    text = "".join(f"<tool_call>f<arg_key>{p}</arg_key><arg_value>{v}</arg_value></tool_call>" for p, v, _ in TABLE)
    return text, [ToolCall("f", {p: want}) for p, _, want in TABLE]


def test_arguments_are_typed_by_their_schema_whole():
    text, want = table_reply()
    content, calls = split_tool_calls(text, argument_schemas(TYPED_TOOLS))
    assert content == ""
    for (param, value, _), got, expected in zip(TABLE, calls, want):
        assert (got.arguments[param], type(got.arguments[param])) == (expected.arguments[param],
                                                                      type(expected.arguments[param])), (param, value)


def test_arguments_are_typed_by_their_schema_streamed_token_by_token():
    text, want = table_reply()
    splitter, calls = ToolCallSplitter(argument_schemas(TYPED_TOOLS)), []
    for i in range(0, len(text), 3):
        calls += splitter.feed(text[i:i + 3])[1]
    rest, last = splitter.flush()
    assert rest == "" and calls + last == want


def test_typed_arguments_in_openai_tool_calls():
    """The chat reply's JSON `arguments` text carries the types (a nullable string "123" stays a JSON string)."""
    text = ("<tool_call>f<arg_key>nullable</arg_key><arg_value>123</arg_value><arg_key>integer</arg_key>"
            "<arg_value>7</arg_value><arg_key>boolean</arg_key><arg_value>true</arg_value></tool_call>")
    typed = ChatReply("m", pieces=None, reasoning=False, tools=ToolCalls(argument_schemas(TYPED_TOOLS)))  # type: ignore[arg-type]
    message = typed.whole(result(text))["choices"][0]["message"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"nullable": "123", "integer": 7,
                                                                            "boolean": True}


# Arguments that hold the markup's own tags (issue 51, item 6: an agent editing a parser or a template writes them, as
# single tokens, like the markup's): a tag is markup only where the call's structure puts it.
EDIT = {"path": "tool_calls.py",
        "new": 'CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"\nEND = "</arg_value></tool_call>" + x\n',
        "old": "<arg_key>k</arg_key><arg_value>v</arg_value>"}
EDIT_TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "properties": {
    k: {"type": "string"} for k in EDIT}}}}]


@pytest.mark.parametrize("after", ["", "<tool_call>now</tool_call>"])
def test_an_argument_holding_the_markups_own_tags_is_read_whole(after):
    text = "I'll edit it." + call_markup("edit", EDIT) + after
    content, calls = split_tool_calls(text, argument_schemas(EDIT_TOOLS))
    assert content == "I'll edit it." and calls == [ToolCall("edit", EDIT)] + ([ToolCall("now", {})] if after else [])


@pytest.mark.parametrize("step", [1, 5, 64])
def test_an_argument_holding_the_markups_own_tags_streamed(step):
    """Streamed, the call is decided once what follows it is known: the next call's tag, or the reply's end."""
    text = call_markup("edit", EDIT) + "\n" + call_markup("edit", EDIT)
    splitter, content, calls = ToolCallSplitter(argument_schemas(EDIT_TOOLS)), "", []
    for i in range(0, len(text), step):
        piece, done = splitter.feed(text[i:i + step])
        content, calls = content + piece, calls + done
    assert calls == [ToolCall("edit", EDIT)]
    rest, last = splitter.flush()
    assert (content + rest).strip() == "" and calls + last == [ToolCall("edit", EDIT)] * 2


def test_text_after_a_call_is_still_content_when_no_reading_ends_the_reply():
    text = "<tool_call>echo<arg_key>text</arg_key><arg_value>hi</arg_value></tool_call> and then some words"
    assert split_tool_calls(text, SCHEMAS) == (" and then some words", [ToolCall("echo", {"text": "hi"})])


def test_call_markup_reads_back():
    args = {"city": "Oslo", "days": 2, "units": {"t": "C"}}
    assert split_tool_calls(call_markup("get_weather", args), SCHEMAS)[1] == [ToolCall("get_weather", args)]


def result(text: str, finish: str = "stop") -> GenerationResult:
    metrics = {k: 0 for k in ("n_prompt_tokens", "n_cached_tokens", "n_generated", "n_drafts", "n_drafted",
                              "n_accepted")} | {k: 0.0 for k in ("prompt_ms", "decode_ms", "prompt_tokens_per_s",
                                                                 "decode_tokens_per_s", "draft_ms", "verify_ms",
                                                                 "mean_accepted_length")}
    return GenerationResult(text, [], finish, metrics | {"acceptance_per_position": [], "drafted_at": [],
                                                         "accepted_at": []})


def reply(parallel: bool = True) -> ChatReply:
    return ChatReply("m", pieces=None, reasoning=False, tools=ToolCalls(SCHEMAS, parallel))  # type: ignore[arg-type]


def test_a_whole_chat_reply_carries_openai_tool_calls():
    body = reply().whole(result(TWO_CALLS))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me check."
    calls = choice["message"]["tool_calls"]
    assert [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("function", "get_weather", {"city": "Paris", "days": 3}), ("function", "echo", {"text": "42"})]
    assert len({c["id"] for c in calls}) == 2


def test_only_calls_means_null_content_and_a_cut_reply_keeps_length():
    only = reply().whole(result(TWO_CALLS[len("Let me check. "):]))["choices"][0]
    assert only["message"]["content"] is None
    cut = reply().whole(result(TWO_CALLS, finish="length"))["choices"][0]
    assert cut["finish_reason"] == "length" and len(cut["message"]["tool_calls"]) == 2


def test_parallel_tool_calls_false_returns_the_first_call_only():
    assert len(reply(parallel=False).whole(result(TWO_CALLS))["choices"][0]["message"]["tool_calls"]) == 1


def test_a_streamed_chat_reply_sends_each_call_once_it_closes():
    r = reply()
    chunks = [c for piece in (TWO_CALLS[i:i + 7] for i in range(0, len(TWO_CALLS), 7)) for c in r.piece(piece)]
    chunks += r.end(result(TWO_CALLS))
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [e for d in deltas for e in d.get("tool_calls", [])]
    assert content == "Let me check. "
    assert [(e["index"], e["function"]["name"]) for e in calls] == [(0, "get_weather"), (1, "echo")]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "tool_calls"
