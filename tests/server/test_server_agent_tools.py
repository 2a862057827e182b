"""Tool use on the agent APIs (issue 16): Anthropic's Messages API (tools, tool_choice, tool_use and tool_result
blocks) and OpenAI's Responses API (function tools, function_call and function_call_output items) on chat
completions' tool machinery.

Request side through HTTP: each API's tools and tool history make the prompt that the equivalent chat request
makes (the same size, the same greedy reply), what needs a grammar (forcing a call) is refused in chat's words, and
what this server cannot take is a 400 naming it; the official clients send and parse these requests. Reply side
in-process, on model-independent text (the tiny model writes no calls): GLM's call markup, in any split, becomes
tool_use blocks / function_call items and their stream events, which the clients' own types parse and the
anthropic client's stream accumulator rebuilds into the whole message."""
from __future__ import annotations

import json
import random

import anthropic
import anthropic.types
import openai.types.responses
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from pydantic import TypeAdapter

from glm5next_runtime.generate import GenerationResult, GenerationStream
from glm5next_runtime.server.anthropic.replies import AnthropicReply
from glm5next_runtime.server.anthropic.schemas import MessagesRequest
from glm5next_runtime.server.openai_responses.replies import ResponsesReply
from glm5next_runtime.server.openai_chat.replies import ChatReply
from glm5next_runtime.server.slot_tasks import SlotTask
from glm5next_runtime.server.tool_replies import ToolCalls
from glm5next_runtime.tool_calls import argument_schemas, call_markup
from live_server import TIMEOUT, Server, post_json

N = 16
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                "parameters": SCHEMA}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather of a city", "input_schema": SCHEMA}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
                    "parameters": SCHEMA}]
ARGS = {"city": "Paris", "days": 2}


def chat_history(result: str = "sunny") -> list[dict]:
    return [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
            {"role": "user", "content": "And tomorrow?"}]


def anthropic_history(**result) -> list[dict]:
    return [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                              {"type": "tool_use", "id": "call_1", "name": "get_weather",
                                               "input": ARGS}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                          "content": [{"type": "text", "text": "sunny"}]} | result,
                                         {"type": "text", "text": "And tomorrow?"}]}]


RESPONSES_INPUT = [{"role": "user", "content": "Weather in Paris?"},
                   {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                         "text": "Let me look."}]},
                   {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                    "arguments": json.dumps(ARGS)},
                   {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                   {"role": "user", "content": "And tomorrow?"}]


@pytest.fixture(scope="module")
def srv(predictable_gguf, tmp_path_factory):
    server = Server(predictable_gguf, tmp_path_factory.mktemp("agent-tools") / "server.log")
    yield server
    server.stop()


def chat(server: Server, **fields) -> dict:
    body = {"messages": chat_history(), "tools": CHAT_TOOLS, "max_tokens": N, "temperature": 0} | NO_THINK | fields
    status, out = post_json(server, "/v1/chat/completions", body)
    assert status == 200, out
    return out


def anthropic_body(**fields) -> dict:
    return {"system": "Be terse.", "messages": anthropic_history(), "tools": ANTHROPIC_TOOLS, "max_tokens": N,
            "temperature": 0, "thinking": {"type": "disabled"}} | fields


def responses_body(**fields) -> dict:
    return {"instructions": "Be terse.", "input": RESPONSES_INPUT, "tools": RESPONSES_TOOLS,
            "max_output_tokens": N, "temperature": 0, "reasoning": {"effort": "none"}} | fields


def claude(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", timeout=TIMEOUT, max_retries=0)


# ------------------------------------------------------------------------------------------ requests (HTTP)

@pytest.mark.parametrize("choice", ["auto", "none"])
def test_anthropic_tools_and_history_make_the_chats_prompt_and_reply(srv, choice):
    want = chat(srv, tool_choice=choice)
    body = anthropic_body(tool_choice={"type": choice})
    status, counted = post_json(srv, "/v1/messages/count_tokens", body)
    assert (status, counted) == (200, {"input_tokens": want["usage"]["prompt_tokens"]})
    status, got = post_json(srv, "/v1/messages", body)
    assert status == 200 and got["stop_reason"] in ("end_turn", "max_tokens")
    content = want["choices"][0]["message"]["content"]  # with tools a text block has no whitespace at its ends
    assert [b["text"] for b in got["content"]] == [content.strip() if choice == "auto" else content]


def test_the_tools_are_in_the_prompt(srv):
    with_tools = post_json(srv, "/v1/messages/count_tokens", anthropic_body())[1]["input_tokens"]
    without = post_json(srv, "/v1/messages/count_tokens", anthropic_body(tools=None))[1]["input_tokens"]
    assert with_tools > without + 20  # GLM's tool description and the function's signature


def test_an_error_result_tells_the_model(srv):
    want = chat(srv, messages=chat_history("Error: sunny"), max_tokens=1)["usage"]["prompt_tokens"]
    body = anthropic_body(messages=anthropic_history(is_error=True))
    assert post_json(srv, "/v1/messages/count_tokens", body)[1] == {"input_tokens": want}


def test_the_anthropic_client_sends_tools_and_tool_history(srv):
    body = anthropic_body()
    got = claude(srv).messages.create(model="m", system=body["system"], messages=body["messages"],
                                      tools=body["tools"], tool_choice={"type": "auto"}, max_tokens=N,
                                      thinking={"type": "disabled"}, extra_body={"temperature": 0})
    assert got.content[0].text == chat(srv)["choices"][0]["message"]["content"].strip()


def test_responses_tools_and_history_make_the_chats_prompt_and_reply(srv):
    want = chat(srv)
    got = srv.client().responses.create(model="m", **responses_body())
    assert got.usage.input_tokens == want["usage"]["prompt_tokens"]
    assert got.output_text == want["choices"][0]["message"]["content"].strip()
    assert [t.model_dump(exclude_none=True) for t in got.tools] == RESPONSES_TOOLS
    assert (got.tool_choice, got.parallel_tool_calls) == ("auto", True)


def test_responses_parallel_tool_calls_is_chats(srv):
    got = srv.client().responses.create(model="m", parallel_tool_calls=False, **responses_body(max_output_tokens=1))
    assert got.parallel_tool_calls is False


def test_anthropics_disable_parallel_tool_use_is_chats_parallel_tool_calls_false():
    def fields(choice: dict) -> dict:
        return MessagesRequest.model_validate(anthropic_body(tool_choice=choice)).chat_fields()
    assert fields({"type": "auto", "disable_parallel_tool_use": True})["parallel_tool_calls"] is False
    assert fields({"type": "auto"})["parallel_tool_calls"] is True


FORCE_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}
FORCED = [  # chat's tool_choice, Anthropic's, Responses': every call, or one named function
    ("required", {"type": "any", "disable_parallel_tool_use": True}, "required"),
    ({"type": "function", "function": {"name": "get_weather"}},
     {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
     {"type": "function", "name": "get_weather"}),
]


@pytest.mark.parametrize("chat_choice, anthropic_choice, responses_choice", FORCED)
def test_a_forced_call_is_the_same_call_on_every_api(srv, chat_choice, anthropic_choice, responses_choice):
    """tool_choice forcing a call (a grammar of GLM's markup): chat returns the call, Anthropic the same as a tool_use
    block (stop_reason tool_use), Responses the same as a function_call item."""
    limit = {"max_tokens": 64}
    want = chat(srv, tools=[{"type": "function", "function": {"name": "get_weather", "parameters": FORCE_SCHEMA}}],
                tool_choice=chat_choice, parallel_tool_calls=False, **limit)
    choice = want["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in choice["message"]["tool_calls"]]
    assert len(calls) == 1 and calls[0][0] == "get_weather" and isinstance(calls[0][1]["city"], str)
    status, got = post_json(srv, "/v1/messages", anthropic_body(
        tools=[{"name": "get_weather", "input_schema": FORCE_SCHEMA}], tool_choice=anthropic_choice, **limit))
    assert status == 200 and got["stop_reason"] == "tool_use", got
    assert [(b["name"], b["input"]) for b in got["content"] if b["type"] == "tool_use"] == calls
    status, got = post_json(srv, "/v1/responses", responses_body(
        tools=[{"type": "function", "name": "get_weather", "parameters": FORCE_SCHEMA}], tool_choice=responses_choice,
        parallel_tool_calls=False, max_output_tokens=64))
    assert status == 200, got
    assert [(i["name"], json.loads(i["arguments"])) for i in got["output"] if i["type"] == "function_call"] == calls


def user_blocks(*blocks: dict) -> dict:
    return {"messages": [{"role": "user", "content": list(blocks)}]}


@pytest.mark.parametrize("body, words", [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0: web_search_20250305 tool"),
    ({"tools": [{"name": "get_weather"}]}, "tools.0.input_schema: Field required"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice.name: Field required"),
    (user_blocks({"type": "tool_use", "id": "t", "name": "f", "input": {}}), "messages.0.content.0: tool_use block"),
    (user_blocks({"type": "tool_result", "content": "x"}), "messages.0.content.0.tool_use_id: Field required"),
    (user_blocks({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}),
     "messages.0.content.0.content.0: image block"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f"}]}]}, "messages.1.content.0.input: Field required"),
])
def test_what_anthropic_tool_use_cannot_take_is_a_400_naming_it(srv, body, words):
    status, out = post_json(srv, "/v1/messages", anthropic_body() | body)
    assert status == 400 and out["error"]["type"] == "invalid_request_error" and words in out["error"]["message"]


@pytest.mark.parametrize("body, words", [
    ({"tools": [{"type": "web_search"}]}, "tools.0: web_search tool"),
    ({"tools": [{"type": "function", "parameters": SCHEMA}]}, "tools.0.name: Field required"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1"}]},
     "input.0.arguments: not a JSON object"),
    ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input.0.name: Field required"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input.0.output: Field required"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}]},
     "input.0.output.0: input_image part"),
    ({"input": [{"type": "item_reference", "id": "fc_1"}]}, "input.0: item_reference item"),
])
def test_what_responses_function_calling_cannot_take_is_a_400_naming_it(srv, body, words):
    status, out = post_json(srv, "/v1/responses", responses_body() | body)
    assert status == 400 and out["error"]["type"] == "invalid_request_error" and words in out["error"]["message"]


# ------------------------------------------------------------------------------------------ replies in-process

TOOLS = ToolCalls(argument_schemas(CHAT_TOOLS))
# GLM-4.5's spelling (newlines between the parts), then the later one; text before, whitespace around the calls
REPLY = ("plan</think>\nLet me check both.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
         "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n<tool_call>get_weather"
         "<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>\n")
CALLS = [("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Rome"})]


def finished(text: str, reason: str = "stop") -> GenerationResult:
    timings = dict.fromkeys(("prompt_ms", "prompt_tokens_per_s", "decode_ms", "decode_tokens_per_s", "n_drafted",
                             "n_accepted"), 0)
    return GenerationResult(text, [1, 2, 3, 4, 5], reason, {"n_prompt_tokens": 7, "n_cached_tokens": 3,
                                                            "n_generated": 5} | timings)


def bound(reply):
    reply.bind(SlotTask(0, 0, {}, 7, GenerationStream(iter(()))))
    return reply


def pieces(text: str, seed: int) -> list[str]:
    """`text` cut at random places (seed 0: every character apart)."""
    if seed == 0:
        return list(text)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 25)))
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


def streamed(reply, text: str, reason: str = "stop") -> list[dict]:
    return reply.start() + [e for p in pieces(text, 7) for e in reply.piece(p)] + reply.end(finished(text, reason))


def without_ids(blocks: list[dict]) -> list[dict]:
    return [{k: v for k, v in b.items() if k != "id"} for b in blocks]


@pytest.mark.parametrize("seed", range(6))
def test_glm_calls_in_any_split_are_anthropic_tool_use_blocks_and_events(seed):
    whole = bound(AnthropicReply("m", True, [], lambda ids: "", TOOLS)).whole(finished(REPLY))
    assert without_ids(whole["content"]) == [
        {"type": "thinking", "thinking": "plan", "signature": ""}, {"type": "text", "text": "Let me check both."}] + [
        {"type": "tool_use", "name": n, "input": a} for n, a in CALLS]
    assert all(b["id"].startswith("toolu_") for b in whole["content"][2:]) and whole["stop_reason"] == "tool_use"
    anthropic.types.Message.model_validate(whole)
    reply = bound(AnthropicReply("m", True, [], lambda ids: "", TOOLS))
    events = reply.start() + [e for p in pieces(REPLY, seed) for e in reply.piece(p)] + reply.end(finished(REPLY))
    tool_events = [e for e in events if e.get("index", 0) >= 2]
    assert [(e["type"], e["index"]) for e in tool_events] == [
        (kind, i) for i in (2, 3) for kind in ("content_block_start", "content_block_delta", "content_block_stop")]
    assert tool_events[0]["content_block"]["input"] == {}
    assert json.loads(tool_events[1]["delta"]["partial_json"]) == CALLS[0][1]
    snapshot, parse = None, TypeAdapter(anthropic.types.RawMessageStreamEvent).validate_python
    for event in events:
        if event["type"] != "ping":  # the client skips pings too
            snapshot = accumulate_event(event=parse(event), current_snapshot=snapshot, json_bufs={})
    final = snapshot.model_dump(exclude_none=True)
    assert without_ids(final["content"]) == without_ids(whole["content"]) and final["stop_reason"] == "tool_use"


@pytest.mark.parametrize("seed", range(6))
def test_glm_calls_in_any_split_are_response_function_call_items_and_events(seed):
    whole = ResponsesReply("m", True, {}, TOOLS).whole(finished(REPLY))
    calls = [o for o in whole["output"] if o["type"] == "function_call"]
    assert [o["type"] for o in whole["output"]] == ["reasoning", "message", "function_call", "function_call"]
    assert [(o["name"], json.loads(o["arguments"]), o["status"]) for o in calls] == [
        (n, a, "completed") for n, a in CALLS]
    assert all(o["id"].startswith("fc_") and o["call_id"].startswith("call_") for o in calls)
    assert whole["output"][1]["content"][0]["text"] == "Let me check both." and whole["status"] == "completed"
    # the usage's newest detail fields (cache_write_tokens, reasoning_tokens) are not reported: checked apart
    openai.types.responses.Response.model_validate(whole | {"usage": None})
    reply = ResponsesReply("m", True, {}, TOOLS)
    events = reply.start() + [e for p in pieces(REPLY, seed) for e in reply.piece(p)] + reply.end(finished(REPLY))
    parse = TypeAdapter(openai.types.responses.ResponseStreamEvent).validate_python
    for event in events[:-1]:
        parse(event)
    final = events[-1]["response"]
    call_events = [(e["type"], e["output_index"]) for e in events if e.get("output_index", 0) >= 2]
    assert call_events == [(f"response.{kind}", i) for i in (2, 3) for kind in (
        "output_item.added", "function_call_arguments.delta", "function_call_arguments.done", "output_item.done")]
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert [(e["item_id"], e["delta"]) for e in deltas] == [(o["id"], o["arguments"]) for o in final["output"][2:]]
    assert [without_ids([o])[0] | {"call_id": None} for o in final["output"]] == [
        without_ids([o])[0] | {"call_id": None} for o in whole["output"]]


def test_the_apis_return_the_calls_chat_completions_returns():
    message = ChatReply("m", None, True, tools=TOOLS).whole(finished(REPLY))["choices"][0]["message"]
    want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]
    blocks = bound(AnthropicReply("m", True, [], lambda ids: "", TOOLS)).whole(finished(REPLY))["content"]
    items = ResponsesReply("m", True, {}, TOOLS).whole(finished(REPLY))["output"]
    assert [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"] == want == CALLS
    assert [(o["name"], json.loads(o["arguments"])) for o in items if o["type"] == "function_call"] == want
    assert blocks[1]["text"] == items[1]["content"][0]["text"] == message["content"]


def test_without_parallel_calls_only_the_first_call_is_returned():
    single = ToolCalls(TOOLS.schemas, parallel=False)
    blocks = bound(AnthropicReply("m", True, [], lambda ids: "", single)).whole(finished(REPLY))["content"]
    assert [b["input"] for b in blocks if b["type"] == "tool_use"] == [CALLS[0][1]]
    events = streamed(ResponsesReply("m", True, {}, single), REPLY)
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["reasoning", "message", "function_call"]


def test_a_reply_cut_after_a_call_is_cut_but_the_call_is_whole():
    text = REPLY + "More wor"
    events = streamed(bound(AnthropicReply("m", True, [], lambda ids: "", TOOLS)), text, "length")
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == [
        "thinking", "text", "tool_use", "tool_use", "text"]
    output = ResponsesReply("m", True, {}, TOOLS).whole(finished(text, "length"))["output"]
    assert [(o["type"], o["status"]) for o in output] == [
        ("reasoning", "completed"), ("message", "completed"), ("function_call", "completed"),
        ("function_call", "completed"), ("message", "incomplete")]
    cut_in_call = ResponsesReply("m", True, {}, TOOLS).whole(finished(REPLY[:-30], "length"))
    assert [o["type"] for o in cut_in_call["output"]] == ["reasoning", "message", "function_call", "message"]
    assert cut_in_call["output"][-1]["content"][0]["text"].startswith("<tool_call>get_weather")


def test_malformed_markup_and_a_reply_without_calls_stay_text():
    text = "Done.<tool_call><arg_key>a</arg_key></tool_call>"
    whole = bound(AnthropicReply("m", False, [], lambda ids: "", TOOLS)).whole(finished(text))
    assert whole["content"] == [{"type": "text", "text": text}] and whole["stop_reason"] == "end_turn"
    output = ResponsesReply("m", False, {}, TOOLS).whole(finished("  Sunny.\n"))["output"]
    assert [(o["type"], o["content"][0]["text"]) for o in output] == [("message", "Sunny.")]


# An agent's edit whose arguments hold GLM's markup itself (issue 51, item 6: code that edits a parser or a template),
# which GLM-4.7/5.x write as the same single tokens as the markup's own tags.
EDIT_ARGS = {"path": "parser.py", "new": 'END = "</arg_value></tool_call>"\nSTART = "<tool_call>f<arg_key>a</arg_key>"\n'}
EDIT_TOOLS = ToolCalls(argument_schemas([{"type": "function", "function": {"name": "edit", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "new": {"type": "string"}}}}}]))
EDIT_REPLY = "Editing it.\n" + call_markup("edit", EDIT_ARGS)


@pytest.mark.parametrize("seed", range(4))
def test_markup_inside_argument_values_round_trips_on_every_api(seed):
    """Whole and streamed in any split, on chat completions, Messages (the anthropic client's accumulator rebuilds
    the call) and Responses (its events parse as the openai client's types): one call, its arguments as written."""
    chat = ChatReply("m", None, False, tools=EDIT_TOOLS)
    message = chat.whole(finished(EDIT_REPLY))["choices"][0]
    assert message["finish_reason"] == "tool_calls" and message["message"]["content"] == "Editing it."
    assert [json.loads(c["function"]["arguments"]) for c in message["message"]["tool_calls"]] == [EDIT_ARGS]
    chat = ChatReply("m", None, False, tools=EDIT_TOOLS)
    chunks = [c for p in pieces(EDIT_REPLY, seed) for c in chat.piece(p)] + chat.end(finished(EDIT_REPLY))
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    assert "".join(d.get("content") or "" for d in deltas).strip() == "Editing it."
    assert [json.loads(e["function"]["arguments"]) for d in deltas for e in d.get("tool_calls", [])] == [EDIT_ARGS]

    reply = bound(AnthropicReply("m", False, [], lambda ids: "", EDIT_TOOLS))
    events = reply.start() + [e for p in pieces(EDIT_REPLY, seed) for e in reply.piece(p)] + \
        reply.end(finished(EDIT_REPLY))
    snapshot, parse = None, TypeAdapter(anthropic.types.RawMessageStreamEvent).validate_python
    for event in events:
        if event["type"] != "ping":
            snapshot = accumulate_event(event=parse(event), current_snapshot=snapshot, json_bufs={})
    final = snapshot.model_dump(exclude_none=True)
    assert [(b["type"], b.get("input")) for b in final["content"]] == [("text", None), ("tool_use", EDIT_ARGS)]
    assert final["stop_reason"] == "tool_use"

    events = streamed(ResponsesReply("m", False, {}, EDIT_TOOLS), EDIT_REPLY)
    for event in events[:-1]:
        TypeAdapter(openai.types.responses.ResponseStreamEvent).validate_python(event)
    calls = [o for o in events[-1]["response"]["output"] if o["type"] == "function_call"]
    assert [(o["name"], json.loads(o["arguments"])) for o in calls] == [("edit", EDIT_ARGS)]
    whole = ResponsesReply("m", False, {}, EDIT_TOOLS).whole(finished(EDIT_REPLY))["output"]
    assert [json.loads(o["arguments"]) for o in whole if o["type"] == "function_call"] == [EDIT_ARGS]
