"""The APIs coding agents speak besides chat completions (issue 16): Anthropic's Messages API (POST /v1/messages,
/v1/messages/count_tokens) and OpenAI's Responses API (POST /v1/responses), through the official anthropic and
openai clients and raw HTTP where the wire shape is the claim.

Both map onto the chat path, so the claims are that they say what chat completions says for the same conversation
(greedy text, reasoning, stop reasons, usage, prompt size) in their own shapes (objects, typed stream events,
errors), with draft-MTP on as off. Two servers on the "predictable" file (NextN layer, drafts accepted): `srv` with
draft-MTP (the default) and `nospec` with --spec-type none. The tiny model never closes its think block, so the
reasoning-then-text order of blocks and items is checked on the replies in-process."""
from __future__ import annotations

import http.client
import json
import socket
import time

import anthropic
import pytest

from glm5next_runtime.generate import GenerationResult, GenerationStream
from glm5next_runtime.server.anthropic.replies import AnthropicReply
from glm5next_runtime.server.anthropic.schemas import CountTokensRequest
from glm5next_runtime.server.openai_responses.replies import ResponsesReply
from glm5next_runtime.server.slot_tasks import SlotTask
from glm5next_runtime.server.stopping import ShuttingDown
from live_server import TIMEOUT, Server, get, post_json

SYSTEM = "Be terse."
# user text that spells control tokens: the guard keeps it text on every API
TURNS = [("user", "Hi there"), ("assistant", "Hello! <|user|>"), ("user", "What is [gMASK]?")]
N = 24
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def srv(predictable_gguf, tmp_path_factory):
    # fixed draft lengths: two tests count drafts, and adaptive lengths follow the machine's timings (a policy that
    # judged drafting unprofitable on a busy machine drafts nothing)
    server = Server(predictable_gguf, tmp_path_factory.mktemp("agents") / "server.log", "--metrics",
                    "--spec-draft-adaptive", "off")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def nospec(predictable_gguf, tmp_path_factory):
    server = Server(predictable_gguf, tmp_path_factory.mktemp("agents-nospec") / "server.log", "--spec-type", "none")
    yield server
    server.stop()


def claude(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", timeout=TIMEOUT, max_retries=0)


def chat(server: Server, think: bool = True, **fields) -> dict:
    """The chat completion of the conversation (greedy, N tokens)."""
    messages = [{"role": "system", "content": SYSTEM}] + [{"role": r, "content": c} for r, c in TURNS]
    body = {"messages": messages, "max_tokens": N, "temperature": 0} | ({} if think else NO_THINK) | fields
    status, out = post_json(server, "/v1/chat/completions", body)
    assert status == 200, out
    return out


def anthropic_body(think: bool = True, **fields) -> dict:
    return {"system": SYSTEM, "messages": [{"role": r, "content": c} for r, c in TURNS], "max_tokens": N,
            "temperature": 0} | ({} if think else {"thinking": {"type": "disabled"}}) | fields


def client_kwargs(body: dict, model: str = "m") -> dict:
    """`body` as the anthropic client takes it: its sampling fields (which recent clients no longer have) as
    extra_body."""
    sampling = {k: v for k, v in body.items() if k in ("temperature", "top_p", "top_k")}
    return {k: v for k, v in body.items() if k not in sampling} | {"model": model, "extra_body": sampling}


def responses_body(think: bool = True, **fields) -> dict:
    items = [{"role": "user", "content": TURNS[0][1]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": TURNS[1][1]}]},
             {"role": "user", "content": [{"type": "input_text", "text": TURNS[2][1]}]}]
    return {"instructions": SYSTEM, "input": items, "max_output_tokens": N, "temperature": 0} | (
        {} if think else {"reasoning": {"effort": "none"}}) | fields  # effort none: no think block


def expected_blocks(out: dict) -> list[dict]:
    """Anthropic's content blocks of a chat completion's message."""
    message = out["choices"][0]["message"]
    blocks = [{"type": "thinking", "thinking": message["reasoning_content"], "signature": ""}] \
        if message.get("reasoning_content") else []
    return blocks + ([{"type": "text", "text": message["content"]}] if message["content"] else [])


def typed_events(raw: bytes) -> list[dict]:
    """The events of a typed stream, checking that each is named by its data's type."""
    out = []
    for event in raw.decode().split("\n\n"):
        if not event:
            continue
        name, data = event.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        out.append(json.loads(data[len("data: "):]))
        assert name[len("event: "):] == out[-1]["type"]
    return out


def stream(server: Server, path: str, body: dict) -> list[dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    try:
        conn.request("POST", path, json.dumps(body | {"stream": True}), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
        return typed_events(response.read())
    finally:
        conn.close()


def without_ids(response: dict) -> dict:
    """A response object without what differs between two responses to one request (ids, time, and how much of
    the prompt was resumed from the cache: the second resumes all of it)."""
    usage = response["usage"] | {"input_tokens_details": None}
    return response | {"id": None, "created_at": None, "output": [o | {"id": None} for o in response["output"]],
                       "usage": usage}


def drafted(server: Server) -> float:
    status, text = get(server, "/metrics")
    assert status == 200
    line = next(x for x in text.decode().splitlines() if x.startswith("llamacpp:spec_decode_num_draft_tokens_total"))
    return float(line.split()[-1])


# ------------------------------------------------------------------------------------------ Anthropic Messages

@pytest.mark.parametrize("think", [True, False])
def test_messages_say_what_chat_completions_says(srv, think):
    want = chat(srv, think)
    got = claude(srv).messages.create(**client_kwargs(anthropic_body(think), "claude-any"))
    assert got.model == "claude-any" and got.id.startswith("msg_") and got.role == "assistant"
    assert [b.model_dump(exclude_none=True) for b in got.content] == expected_blocks(want)
    assert got.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[want["choices"][0]["finish_reason"]]
    usage = want["usage"]
    assert got.usage.input_tokens + got.usage.cache_read_input_tokens == usage["prompt_tokens"]
    assert got.usage.output_tokens == usage["completion_tokens"]
    assert got.usage.cache_read_input_tokens >= usage["prompt_tokens_details"]["cached_tokens"]  # same prompt again


@pytest.mark.parametrize("think", [True, False])
def test_messages_stream_is_the_whole_message_in_anthropic_events(srv, think):
    whole = post_json(srv, "/v1/messages", anthropic_body(think))[1]
    events = stream(srv, "/v1/messages", anthropic_body(think))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == whole["usage"]["input_tokens"] + whole["usage"]["cache_read_input_tokens"]
    (block,) = whole["content"]  # the tiny model never closes its think block: one block either way
    assert kinds[2:-2] == ["content_block_start"] + ["content_block_delta"] * (kinds.count("content_block_delta")) \
        + ["content_block_stop"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    if think:
        assert deltas[-1] == {"type": "signature_delta", "signature": ""}
        assert "".join(d["thinking"] for d in deltas[:-1]) == block["thinking"]
    else:
        assert "".join(d["text"] for d in deltas) == block["text"]
    assert events[-2]["delta"] == {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == whole["usage"]["output_tokens"]
    with claude(srv).messages.stream(**client_kwargs(anthropic_body(think))) as s:
        final = s.get_final_message()
    assert [b.model_dump(exclude_none=True) for b in final.content] == whole["content"]
    assert final.usage.output_tokens == whole["usage"]["output_tokens"]


def test_stop_sequence_ends_the_text_and_is_reported(srv):
    full = chat(srv, think=False)["choices"][0]["message"]["content"]
    stop = full[8:11]
    want = chat(srv, think=False, stop=[stop])["choices"][0]
    assert want["finish_reason"] == "stop" and full.startswith(want["message"]["content"])
    body = anthropic_body(think=False, stop_sequences=["never-said", stop])
    got = claude(srv).messages.create(**client_kwargs(body))
    assert got.content[0].text == want["message"]["content"]
    assert (got.stop_reason, got.stop_sequence) == ("stop_sequence", stop)
    with claude(srv).messages.stream(**client_kwargs(body)) as s:
        final = s.get_final_message()
    assert (final.content[0].text, final.stop_reason, final.stop_sequence) == (got.content[0].text, "stop_sequence",
                                                                               stop)


def test_count_tokens_is_the_chat_prompts_size(srv):
    prompt_tokens = chat(srv, max_tokens=1)["usage"]["prompt_tokens"]
    body = anthropic_body()
    counted = claude(srv).messages.count_tokens(model="m", system=body["system"], messages=body["messages"])
    assert counted.input_tokens == prompt_tokens
    status, out = post_json(srv, "/v1/messages/count_tokens", {"messages": body["messages"], "system": SYSTEM})
    assert (status, out) == (200, {"input_tokens": prompt_tokens})


def test_no_messages_is_the_templates_generation_prompt_alone(srv):
    """llama-server answers a Messages request without messages (a 200, not a 400)."""
    status, out = post_json(srv, "/v1/messages", {"messages": [], "max_tokens": 2, "temperature": 0})
    assert status == 200 and out["type"] == "message", out
    _, counted = post_json(srv, "/v1/messages/count_tokens", {"messages": []})
    _, ids = post_json(srv, "/tokenize", {"content": "[gMASK]<sop><|assistant|>\n<think>", "add_special": True})
    assert out["usage"]["input_tokens"] == counted["input_tokens"] == len(ids["tokens"])


def test_claude_codes_billing_stamp_does_not_change_the_prompt():
    """The cch stamp and the version's fingerprint change on every request; blanked, the prompt (and the prompt
    cache) stays the same. Header shapes from Claude Code's public captures: with and without a fingerprint."""
    def fields(header: str) -> dict:
        system = [{"type": "text", "text": header}, {"type": "text", "text": "You are Claude Code. cch=12345;"}]
        return CountTokensRequest.model_validate({"system": system, "messages": [{"role": "user", "content": "hi"}]})\
            .chat_fields()
    old = "x-anthropic-billing-header: cc_version=2.1; cch={};"
    assert fields(old.format("a5145")) == fields(old.format("9e0c1"))
    assert fields(old.format("a5145"))["messages"][0]["content"] == \
        "x-anthropic-billing-header: cc_version=2.1; cch=fffff;You are Claude Code. cch=12345;"
    new = "x-anthropic-billing-header: cc_version=2.1.138.{}; cc_entrypoint=cli; cch={};"
    assert fields(new.format("fbe", "a39d0")) == fields(new.format("03c", "9e0c1"))
    assert fields(new.format("fbe", "a39d0"))["messages"][0]["content"] == \
        "x-anthropic-billing-header: cc_version=2.1.138.fff; cc_entrypoint=cli; cch=fffff;You are Claude Code. cch=12345;"


def test_a_claude_code_request_resumes_past_its_changed_billing_header(srv):
    """Claude Code's header opens the prompt and changes on every request (fingerprint and cch): the same
    conversation sent again with a new header reads >= 90% of its input from the prompt cache (issue 25)."""
    def usage(fingerprint: str, cch: str) -> dict:
        header = f"x-anthropic-billing-header: cc_version=2.1.138.{fingerprint}; cc_entrypoint=cli; cch={cch};"
        system = [{"type": "text", "text": header},
                  {"type": "text", "text": "You are Claude Code, a coding agent. " * 20, "cache_control": {"type": "ephemeral"}}]
        status, out = post_json(srv, "/v1/messages", anthropic_body(system=system, max_tokens=4))
        assert status == 200, out
        return out["usage"]
    first = usage("fbe", "a39d0")
    second = usage("03c", "9e0c1")
    assert second["cache_read_input_tokens"] >= 0.9 * (first["input_tokens"] + first["cache_read_input_tokens"])


@pytest.mark.parametrize("body, status, words", [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400, "tools.0: "),
    ({"max_tokens": None}, 400, "max_tokens"),
    ({"temperature": "hot"}, 400, "temperature"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, 400, "messages.0.content.0"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]}, 400,
     "messages.0.content.0: tool_result block"),
    ({"messages": [{"role": "user", "content": "word " * 20000}]}, 400, "prompt is too long: "),
])
def test_messages_errors_are_anthropic_shaped(srv, body, status, words):
    fields = {k: v for k, v in (anthropic_body() | body).items() if v is not None}
    got_status, out = post_json(srv, "/v1/messages", fields)
    assert got_status == status and out["type"] == "error" and set(out) == {"type", "error"}
    assert out["error"]["type"] == "invalid_request_error" and words in out["error"]["message"]


def test_the_anthropic_client_raises_the_servers_error(srv):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude(srv).messages.create(**client_kwargs(anthropic_body()), tools=[{"name": "t", "input_schema": {}}],
                                    tool_choice={"type": "tool", "name": "missing"})
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "tool_choice: no function named 'missing'" in e.value.body["error"]["message"]


@pytest.mark.parametrize("think", [True, False])
def test_messages_with_draft_mtp_say_what_they_say_without(srv, nospec, think):
    before = drafted(srv)
    with_drafts = post_json(srv, "/v1/messages", anthropic_body(think))[1]
    assert drafted(srv) > before  # the NextN head drafted
    without = post_json(nospec, "/v1/messages", anthropic_body(think))[1]
    assert with_drafts["content"] == without["content"] and with_drafts["stop_reason"] == without["stop_reason"]
    assert stream(srv, "/v1/messages", anthropic_body(think))[2:] == stream(nospec, "/v1/messages",
                                                                            anthropic_body(think))[2:]


def test_a_stream_whose_client_leaves_frees_its_slot(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=TIMEOUT)
    conn.request("POST", "/v1/messages", json.dumps(anthropic_body(max_tokens=4000) | {"stream": True}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.readline() == b"event: message_start\n"
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.monotonic() + 15
    while json.loads(get(srv, "/health")[1])["slots_idle"] != 1:
        assert time.monotonic() < deadline, "the slot is still busy"
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------ OpenAI Responses

@pytest.mark.parametrize("think", [True, False])
def test_responses_say_what_chat_completions_says(srv, think):
    want = chat(srv, think)
    message = want["choices"][0]["message"]
    got = srv.client().responses.create(model="gpt-any", **responses_body(think))
    assert got.model == "gpt-any" and got.id.startswith("resp_")
    reasoning = [i for i in got.output if i.type == "reasoning"]
    assert [c.text for i in reasoning for c in i.content] == ([message["reasoning_content"]]
                                                              if message.get("reasoning_content") else [])
    assert got.output_text == message["content"]
    length = want["choices"][0]["finish_reason"] == "length"
    assert got.status == ("incomplete" if length else "completed")
    assert (got.incomplete_details.reason if length else got.incomplete_details) == (
        "max_output_tokens" if length else None)
    usage = want["usage"]
    assert (got.usage.input_tokens, got.usage.output_tokens, got.usage.total_tokens) == (
        usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"])
    assert got.usage.input_tokens_details.cached_tokens >= usage["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("think", [True, False])
def test_responses_stream_is_the_whole_response_in_typed_events(srv, think):
    whole = post_json(srv, "/v1/responses", responses_body(think))[1]
    events = stream(srv, "/v1/responses", responses_body(think))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    part = "reasoning_text" if think else "output_text"
    n = kinds.count(f"response.{part}.delta")
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] + [f"response.{part}.delta"] * n + [
        f"response.{part}.done", "response.content_part.done", "response.output_item.done",
        f"response.{whole['status']}"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    (item,) = whole["output"]
    text = item["content"][0]["text"]
    assert "".join(e["delta"] for e in events if e["type"].endswith(".delta")) == text
    item_ids = {e.get("item_id", e.get("item", {}).get("id")) for e in events[2:-1]}
    assert item_ids == {events[-1]["response"]["output"][0]["id"]}  # every event of the item names it
    assert without_ids(events[-1]["response"]) == without_ids(whole)
    got = list(srv.client().responses.create(model="m", stream=True, **responses_body(think)))
    assert got[-1].response.output_text == ("" if think else text)


def test_responses_with_speculation_off_say_what_they_say_with_it(srv):
    before = drafted(srv)
    with_drafts = post_json(srv, "/v1/responses", responses_body())[1]
    assert drafted(srv) > before
    before = drafted(srv)
    without = post_json(srv, "/v1/responses", responses_body(**{"speculative.n_max": 0}))[1]
    assert drafted(srv) == before
    assert [o["content"] for o in with_drafts["output"]] == [o["content"] for o in without["output"]]


def test_responses_take_a_string_input_and_chat_completions_fields(srv):
    """A string input is one user message; the body's other fields are chat completions' (llama-server's
    conversion), so a sampled reply with the same seed is the chat's."""
    sampled = {"temperature": 1.0, "top_k": 5, "seed": 7} | NO_THINK
    want = post_json(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi there"}],
                                                   "max_tokens": 12} | sampled)[1]
    got = srv.client().responses.create(model="m", input="Hi there", max_output_tokens=12, temperature=1.0,
                                        extra_body={"top_k": 5, "seed": 7} | NO_THINK)
    assert got.output_text == want["choices"][0]["message"]["content"]


@pytest.mark.parametrize("body, words", [
    ({"previous_response_id": "resp_1"}, "previous_response_id: "),
    ({"conversation": "conv_1"}, "conversation: "),
    ({"tools": [{"type": "file_search"}]}, "tools.0: "),
    ({"input": [{"type": "item_reference", "id": "fc_1"}]}, "input.0: item_reference"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input.0.content.0"),
    ({"text": {"format": {"type": "json_object"}}}, "text: "),
    ({"background": True}, "background: "),
    ({"top_k": -1}, "top_k: "),
])
def test_responses_refusals_name_the_field_in_openais_shape(srv, body, words):
    status, out = post_json(srv, "/v1/responses", responses_body() | body)
    assert status == 400 and out["error"]["type"] == "invalid_request_error" and words in out["error"]["message"]


# ------------------------------------------------------------------------------------------ replies in-process

def finished(text: str, reason: str = "stop") -> GenerationResult:
    metrics = {"n_prompt_tokens": 7, "n_cached_tokens": 3, "n_generated": 5, "prompt_ms": 2.0, "decode_ms": 4.0,
               "prompt_tokens_per_s": 2e3, "n_drafted": 0, "n_accepted": 0}  # a result's metrics (generate.py)
    return GenerationResult(text, [1, 2, 3, 4, 5], reason, metrics)


PIECES = ["pla", "n</th", "ink>\nans", "wer"]


def bound(reply):
    reply.bind(SlotTask(0, 0, {}, 7, GenerationStream(iter(()))))
    return reply


def test_reasoning_then_text_are_two_anthropic_blocks_in_order():
    whole = bound(AnthropicReply("m", True, [], lambda ids: "")).whole(finished("".join(PIECES)))
    assert whole["content"] == [{"type": "thinking", "thinking": "plan", "signature": ""},
                                {"type": "text", "text": "answer"}]
    assert whole["usage"] == {"input_tokens": 4, "cache_read_input_tokens": 3, "output_tokens": 5}
    reply = bound(AnthropicReply("m", True, [], lambda ids: ""))
    events = reply.start() + [e for p in PIECES for e in reply.piece(p)] + reply.end(finished("".join(PIECES)))
    shape = [(e["type"], e.get("index"), e.get("delta", {}).get("type")) for e in events]
    assert shape == [("message_start", None, None), ("ping", None, None),
                     ("content_block_start", 0, None), ("content_block_delta", 0, "thinking_delta"),
                     ("content_block_delta", 0, "thinking_delta"), ("content_block_delta", 0, "signature_delta"),
                     ("content_block_stop", 0, None), ("content_block_start", 1, None),
                     ("content_block_delta", 1, "text_delta"), ("content_block_delta", 1, "text_delta"),
                     ("content_block_stop", 1, None), ("message_delta", None, None),
                     ("message_stop", None, None)]
    assert events[2]["content_block"]["type"] == "thinking" and events[7]["content_block"]["type"] == "text"


def test_reasoning_then_text_are_two_response_items_in_order():
    echo = {"instructions": None}
    whole = bound(ResponsesReply("m", True, echo)).whole(finished("".join(PIECES), "length"))
    assert [(o["type"], o["status"], o["content"][0]["text"]) for o in whole["output"]] == [
        ("reasoning", "completed", "plan"), ("message", "incomplete", "answer")]
    reply = bound(ResponsesReply("m", True, echo))
    events = reply.start() + [e for p in PIECES for e in reply.piece(p)] + reply.end(finished("".join(PIECES),
                                                                                              "length"))
    items = [(e["type"], e.get("output_index")) for e in events if "output_item" in e["type"]]
    assert items == [("response.output_item.added", 0), ("response.output_item.done", 0),
                     ("response.output_item.added", 1), ("response.output_item.done", 1)]
    assert events[-1]["type"] == "response.incomplete"
    assert without_ids(events[-1]["response"]) == without_ids(whole)


def test_a_stream_cut_short_ends_with_each_apis_error_event():
    cut = ShuttingDown(": the generation was stopped")
    assert typed_events(AnthropicReply("m", False, [], lambda ids: "").error_event(cut).encode()) == [
        {"type": "error", "error": {"type": "overloaded_error",
                                    "message": "the server is shutting down: the generation was stopped"}}]
    reply = ResponsesReply("m", False, {})
    reply.start()
    assert typed_events(reply.error_event(cut).encode()) == [
        {"type": "error", "sequence_number": 2, "code": "unavailable_error",
         "message": "the server is shutting down: the generation was stopped", "param": None}]
