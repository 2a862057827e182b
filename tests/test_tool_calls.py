"""GLM's tool-call markup read back into calls (glm5next_runtime/tool_calls.py) and a chat reply's tool_calls in
OpenAI's shape (server/tool_replies.py, server/responses.py ChatReply), on model-independent text: whole replies,
the same replies streamed in every split, GLM-4.5's and later spellings, and malformed markup that stays content."""
from __future__ import annotations

import json
import random

import pytest

from glm5next_runtime.generate import GenerationResult
from glm5next_runtime.server.responses import ChatReply
from glm5next_runtime.server.tool_replies import ToolCalls
from glm5next_runtime.tool_calls import ToolCall, ToolCallSplitter, call_markup, split_tool_calls, string_parameters

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "object"}}}}},
         {"type": "function", "function": {"name": "echo", "parameters": {"properties": {"text": {"type": "string"}}}}}]
STRINGS = string_parameters(TOOLS)
TWO_CALLS = ("Let me check. <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
             "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call><tool_call>echo<arg_key>text</arg_key>"
             "<arg_value>42</arg_value></tool_call>")
WANT = [ToolCall("get_weather", {"city": "Paris", "days": 3}), ToolCall("echo", {"text": "42"})]


def test_calls_and_content_of_a_whole_reply():
    """A string parameter stays text ("42" for echo), any other is JSON (3 for days)."""
    assert split_tool_calls(TWO_CALLS, STRINGS) == ("Let me check. ", WANT)


def test_glm45_newlines_between_the_parts():
    text = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York</arg_value>\n<arg_key>units"
            "</arg_key>\n<arg_value>{\"temp\": \"C\"}</arg_value>\n</tool_call>")
    assert split_tool_calls(text, STRINGS) == ("", [ToolCall("get_weather", {"city": "New York",
                                                                             "units": {"temp": "C"}})])


def test_a_call_without_arguments_and_an_unknown_function():
    assert split_tool_calls("<tool_call>now</tool_call>", STRINGS) == ("", [ToolCall("now", {})])


@pytest.mark.parametrize("text", [
    "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",        # no name
    "<tool_call>f<arg_key>a</arg_key></tool_call>",                                 # a key without a value
    "<tool_call>f <tool_call>g</tool_call>",                                        # nested open
    "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value> trailing words</tool_call>",
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par",                  # cut off
])
def test_malformed_markup_stays_content(text):
    content, calls = split_tool_calls(text, STRINGS)
    assert content == text and calls == []


@pytest.mark.parametrize("seed", range(20))
def test_a_stream_split_anywhere_gives_the_whole_replys_calls(seed):
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(TWO_CALLS)), rng.randint(1, 30)))
    pieces = [TWO_CALLS[a:b] for a, b in zip([0] + cuts, cuts + [len(TWO_CALLS)])]
    splitter, content, calls = ToolCallSplitter(STRINGS), "", []
    for piece in pieces:
        text, done = splitter.feed(piece)
        assert "<" not in text  # no piece of the markup leaks into the content
        content, calls = content + text, calls + done
    assert (content + splitter.flush(), calls) == ("Let me check. ", WANT)


def test_call_markup_reads_back():
    args = {"city": "Oslo", "days": 2, "units": {"t": "C"}}
    assert split_tool_calls(call_markup("get_weather", args), STRINGS)[1] == [ToolCall("get_weather", args)]


def result(text: str, finish: str = "stop") -> GenerationResult:
    metrics = {k: 0 for k in ("n_prompt_tokens", "n_cached_tokens", "n_generated", "n_drafts", "n_drafted",
                              "n_accepted")} | {k: 0.0 for k in ("prompt_ms", "decode_ms", "prompt_tokens_per_s",
                                                                 "decode_tokens_per_s", "draft_ms", "verify_ms",
                                                                 "mean_accepted_length")}
    return GenerationResult(text, [], finish, metrics | {"acceptance_per_position": [], "drafted_at": [],
                                                         "accepted_at": []})


def reply(parallel: bool = True) -> ChatReply:
    return ChatReply("m", pieces=None, reasoning=False, tools=ToolCalls(STRINGS, parallel))  # type: ignore[arg-type]


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
