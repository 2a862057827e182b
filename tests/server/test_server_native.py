"""llama-server's native endpoints and flags (issue 16): /tokenize, /detokenize, /apply-template, /props, /slots,
/v1/health, the native /completion (and /completions), assistant prefill, system_fingerprint, the llamacpp:*
metrics, CORS, the context split among slots, alias lists, --no-jinja's built-in template, several --host addresses
and the flags that refuse what the engine cannot do. The expected values are llama-server's documented behaviour
(tools/server/README.md and tools/server/tests).

Two servers on the tiny file without a NextN layer: `srv` (two slots sharing -c 1024, server-wide sampling defaults,
--metrics, an alias list) and `locked` (--api-key, --no-slots, --no-jinja, --props, --kv-unified, two addresses).
What a fresh app answers is checked in-process."""
from __future__ import annotations

import asyncio
import http.client
import json
import math
import time

import pytest
from starlette.testclient import TestClient

from glm5next_runtime import Model
from glm5next_runtime.generate import end_of_generation_ids
from glm5next_runtime.server.app import create_app
from glm5next_runtime.server.config import ServerConfig
from glm5next_runtime.server.args import parse_args
from glm5next_runtime.server.build_info import BUILD_INFO
from glm5next_runtime.server.cors import CORSMiddleware, CORSPolicy
from glm5next_runtime.server.slots import SlotPool
from live_server import TIMEOUT, Server, get, post_json

KEY = "sk-native"
RENDERED = "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think>"  # the generated checkpoints' template
NO_THINK = {"enable_thinking": False}
MESSAGES = [{"role": "user", "content": "Hi there"}]
SLOT_CTX = 512  # srv: -c 1024 shared by 2 slots; locked: -c 512 for each slot (--kv-unified)
TOP_K_OVERRIDE = "glm5next.attention.indexer.top_k=int:8"  # locked's (the file: 16)
DEFAULT_N = 12  # srv's -n


@pytest.fixture(scope="module")
def srv(plain_gguf, tmp_path_factory):
    server = Server(plain_gguf, tmp_path_factory.mktemp("native") / "server.log", "-np", "2", "--metrics",
                    "--alias", "zeta,alpha", "--tags", "t1", "--temp", "0", "-n", str(DEFAULT_N), "--seed", "42",
                    "--top-k", "5", n_ctx=2 * SLOT_CTX)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def locked(plain_gguf, tmp_path_factory):
    server = Server(plain_gguf, tmp_path_factory.mktemp("locked") / "server.log", "--api-key", KEY, "--no-slots",
                    "--no-jinja", "--props", "-kvu", "-np", "2", "--host", "127.0.0.1,127.0.0.2",
                    "--override-kv", TOP_K_OVERRIDE, n_ctx=SLOT_CTX)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def model(plain_gguf) -> Model:
    return Model(plain_gguf, n_ctx=SLOT_CTX, n_threads=1)


AUTH = {"Authorization": f"Bearer {KEY}"}


def exchange(server: Server, method: str, path: str, body: object = None, headers: dict | None = None,
             host: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one request."""
    conn = http.client.HTTPConnection(host, server.port, timeout=TIMEOUT)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def events(raw: bytes) -> list[dict]:
    """The JSON of every `data:` event of a stream."""
    return [json.loads(line[len(b"data: "):]) for line in raw.split(b"\n") if line.startswith(b"data: {")]


def greedy(model: Model, prompt: str | list[int], n: int = DEFAULT_N):
    return model.generate(prompt, max_tokens=n, temperature=0)


# ------------------------------------------------------------------------------------------ tokenizer

def test_tokenize_detokenize_round_trip(srv, model):
    text = "What is the capital of France?"
    status, out = post_json(srv, "/tokenize", {"content": text})
    assert status == 200 and out == {"tokens": model.tokenize(text)}
    status, out = post_json(srv, "/detokenize", {"tokens": out["tokens"]})
    assert status == 200 and out == {"content": text}


def test_tokenize_pieces_are_text_or_bytes(srv, model):
    """llama-server: a piece is a string when it is valid UTF-8 on its own, else the list of its bytes."""
    text = "unicode 媽 and emoji 🤗"
    status, out = post_json(srv, "/tokenize", {"content": text, "with_pieces": True})
    assert status == 200 and [t["id"] for t in out["tokens"]] == model.tokenize(text)
    pieces = [t["piece"] for t in out["tokens"]]
    assert any(isinstance(p, list) for p in pieces) and any(isinstance(p, str) for p in pieces)
    assert b"".join(bytes(p) if isinstance(p, list) else p.encode() for p in pieces) == text.encode()


def test_tokenize_specials_and_mixed_content(srv, model):
    status, out = post_json(srv, "/tokenize", {"content": "<|user|>"})
    assert status == 200 and out["tokens"] == model.tokenize("<|user|>") and len(out["tokens"]) == 1  # parsed
    status, plain = post_json(srv, "/tokenize", {"content": "<|user|>", "parse_special": False})
    assert status == 200 and plain["tokens"] == model.tokenize("<|user|>", parse_special=False)
    assert len(plain["tokens"]) > 1
    status, out = post_json(srv, "/tokenize", {"content": ["Hello", 5, " world"], "add_special": True})
    assert out["tokens"] == model.tokenize("Hello", add_special=True) + [5] + model.tokenize(" world")
    assert post_json(srv, "/tokenize", {})[1] == {"tokens": []}
    status, out = post_json(srv, "/detokenize", {"tokens": [10**6]})
    assert status == 400 and "1000000" in out["error"]["message"]


# ------------------------------------------------------------------------------------------ chat template, prefill

def test_apply_template_gives_the_chat_prompt(srv):
    status, out = post_json(srv, "/apply-template", {"messages": MESSAGES})
    assert status == 200 and out == {"prompt": RENDERED}
    status, out = post_json(srv, "/apply-template", {"messages": MESSAGES, "add_generation_prompt": False})
    assert status == 200 and out == {"prompt": "[gMASK]<sop><|user|>\nHi there"}
    # the guard's marks are not part of the prompt: a user's markup comes back as the text it was
    status, out = post_json(srv, "/apply-template", {"messages": [{"role": "user", "content": "a <|assistant|> b"}]})
    assert out["prompt"] == "[gMASK]<sop><|user|>\na <|assistant|> b<|assistant|>\n<think>"


def test_a_final_assistant_message_is_continued(srv, model):
    """llama-server's prefill: the messages before it with the generation prompt, then its text; the reply goes
    on from there."""
    messages = MESSAGES + [{"role": "assistant", "content": "The answer is"}]
    status, out = post_json(srv, "/apply-template", {"messages": messages})
    assert status == 200 and out["prompt"] == RENDERED + "The answer is"
    status, out = post_json(srv, "/apply-template", {"messages": messages, "chat_template_kwargs": NO_THINK})
    prompt = "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think></think>\nThe answer is"
    assert out["prompt"] == prompt
    status, out = post_json(srv, "/v1/chat/completions", {"messages": messages, "max_tokens": 8,
                                                          "chat_template_kwargs": NO_THINK})
    assert status == 200 and out["choices"][0]["message"]["content"] == greedy(model, prompt, 8).text


def test_two_final_assistant_messages_are_refused(srv):
    messages = MESSAGES + [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    for path in ("/apply-template", "/v1/chat/completions"):
        status, out = post_json(srv, path, {"messages": messages})
        assert status == 400
        assert out["error"]["message"] == "Cannot have 2 or more assistant messages at the end of the list."


def test_continue_final_message_false_starts_a_new_turn(srv):
    messages = MESSAGES + [{"role": "assistant", "content": "Done."}]
    status, out = post_json(srv, "/apply-template", {"messages": messages, "continue_final_message": False})
    assert status == 200 and out["prompt"] == "[gMASK]<sop><|user|>\nHi there<|assistant|>\nDone.<|assistant|>\n<think>"
    status, out = post_json(srv, "/apply-template", {"messages": MESSAGES, "continue_final_message": True,
                                                     "add_generation_prompt": False})
    assert status == 400 and "continue_final_message" in out["error"]["message"]


def test_continue_final_message_needs_add_generation_prompt_off(srv):
    """llama-server (and vLLM) refuse both at once; add_generation_prompt defaults to true."""
    messages = MESSAGES + [{"role": "assistant", "content": "The answer is"}]
    for extra in ({}, {"add_generation_prompt": True}):
        status, out = post_json(srv, "/v1/chat/completions", {"messages": messages, "continue_final_message": True,
                                                              "max_tokens": 1, **extra})
        assert status == 400
        assert out["error"]["message"] == "Cannot set both add_generation_prompt and continue_final_message to true."
    status, out = post_json(srv, "/apply-template", {"messages": messages, "continue_final_message": True,
                                                     "add_generation_prompt": False})
    assert status == 200 and out["prompt"] == RENDERED + "The answer is"


def test_no_jinja_chats_with_the_builtin_glm_template(locked):
    status, out = post_json(locked, "/apply-template", {"messages": MESSAGES}, headers=AUTH)
    assert status == 200 and out == {"prompt": "[gMASK]<sop><|user|>\nHi there<|assistant|>\n"}
    status, out = post_json(locked, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 4}, headers=AUTH)
    assert status == 200 and out["choices"][0]["message"]["role"] == "assistant"


# ------------------------------------------------------------------------------------------ native completion

def test_completion_has_llama_servers_native_shape(srv, model):
    """No sampling fields: the server-wide defaults (--temp 0, -n 12, --seed 42, --top-k 5) apply."""
    want = greedy(model, "Hello world")
    status, out = post_json(srv, "/completion", {"prompt": "Hello world"})
    assert status == 200
    assert out["content"] == want.text and out["tokens"] == [] and out["stop"] is True
    assert out["stop_type"] == {"length": "limit", "stop": "eos"}[want.finish_reason] and out["stopping_word"] == ""
    assert out["tokens_predicted"] == len(want.tokens) == out["timings"]["predicted_n"]
    assert out["tokens_evaluated"] == want.metrics["n_prompt_tokens"]
    assert out["prompt"] == model.detokenize(model.tokenize("Hello world", add_special=True))
    assert out["model"] == "alpha" and out["id_slot"] in (0, 1) and out["truncated"] is False
    assert out["has_new_line"] == ("\n" in want.text)
    settings = out["generation_settings"]
    assert (settings["n_predict"], settings["seed"], settings["temperature"], settings["top_k"]) == (DEFAULT_N, 42,
                                                                                                     0.0, 5)
    assert "choices" not in out and "system_fingerprint" not in out


def test_a_requests_n_predict_wins_over_the_servers_and_return_tokens_gives_ids(srv, model):
    want = greedy(model, "Once upon a time", DEFAULT_N + 4)  # llama-server: the per-request limit takes priority
    status, out = post_json(srv, "/completion", {"prompt": "Once upon a time", "n_predict": DEFAULT_N + 4,
                                                 "return_tokens": True})
    assert status == 200 and out["generation_settings"]["n_predict"] == DEFAULT_N + 4
    assert out["tokens"] == want.tokens and all(isinstance(t, int) for t in out["tokens"])
    status, out = post_json(srv, "/completion", {"prompt": "Once upon a time", "n_predict": 3})
    assert out["tokens_predicted"] == 3 and out["content"] == greedy(model, "Once upon a time", 3).text


def test_ignore_eos_bans_the_end_tokens_and_generation_settings_list_the_bias(srv, model):
    """llama-server's ignore_eos appends a -inf bias (null in JSON) for each end-of-generation token to the
    request's logit_bias, and generation_settings shows the list."""
    prompt = next(p for p in ("Hi", "A", "Hello world", "Once upon a time", "1 2 3")
                  if greedy(model, p, 64).finish_reason == "stop")  # ends by itself within 64 tokens
    ends = end_of_generation_ids(model.tokenizer)
    want = model.generate(prompt, max_tokens=64, temperature=0, logit_bias=[(9, 2.0)] + [(t, -math.inf) for t in ends])
    status, out = post_json(srv, "/completion", {"prompt": prompt, "n_predict": 64, "ignore_eos": True,
                                                 "logit_bias": [[9, 2.0]]})
    assert status == 200 and out["content"] == want.text and out["tokens_predicted"] == 64
    assert out["stop_type"] == "limit" and out["generation_settings"]["ignore_eos"] is True
    assert out["generation_settings"]["logit_bias"] == [{"bias": 2.0, "token": 9}] + [{"bias": None, "token": t}
                                                                                       for t in ends]
    status, out = post_json(srv, "/completion", {"prompt": prompt, "n_predict": 64})
    assert out["stop_type"] == "eos" and out["generation_settings"]["logit_bias"] == []
    assert out["generation_settings"]["ignore_eos"] is False


def test_a_prompt_object_is_its_prompt_string_and_media_are_refused(srv, model):
    """llama-server's {"prompt_string", "multimodal_data"} prompt: the text is the prompt; a text-only model
    refuses media."""
    status, out = post_json(srv, "/completion", {"prompt": {"prompt_string": "Once upon a time"}, "n_predict": 3})
    assert status == 200 and out["content"] == greedy(model, "Once upon a time", 3).text
    status, out = post_json(srv, "/completion", {"prompt": {"prompt_string": "See <__media__>",
                                                            "multimodal_data": ["iVBORw0KGgo="]}})
    assert status == 400 and out["error"]["message"].startswith("prompt.multimodal_data: not supported")


def test_input_tokens_count_the_prompt_a_request_would_generate_from(srv):
    status, out = post_json(srv, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1})
    n = out["usage"]["prompt_tokens"]
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
        assert post_json(srv, path, {"messages": MESSAGES}) == (200, {"input_tokens": n})
    status, out = post_json(srv, "/v1/responses", {"input": "Hi there", "max_output_tokens": 1})
    n = out["usage"]["input_tokens"]
    for path in ("/v1/responses/input_tokens", "/responses/input_tokens"):
        assert post_json(srv, path, {"input": "Hi there"}) == (200, {"input_tokens": n})


def test_a_stop_string_is_the_stopping_word(srv, model):
    full = greedy(model, "A B C D").text
    stop = next(full[i:i + 2] for i in range(len(full) // 3, len(full) - 2) if "\ufffd" not in full[i:i + 2])
    status, out = post_json(srv, "/completion", {"prompt": "A B C D", "stop": [stop]})
    assert status == 200 and out["content"] == full[:full.find(stop)]
    assert (out["stop_type"], out["stopping_word"]) == ("word", stop)


def test_token_and_mixed_prompts_and_several_prompts(srv, model):
    ids = model.tokenize("Hello world", add_special=True)
    want = greedy(model, ids).text
    assert post_json(srv, "/completion", {"prompt": ids})[1]["content"] == want
    assert post_json(srv, "/completion", {"prompt": ids[:1] + ["world"]})[1]["content"] == greedy(
        model, ids[:1] + model.tokenize("world")).text
    # several prompts (llama-server's: a list without token ids at its top): a list of bodies, in order
    status, out = post_json(srv, "/completion", {"prompt": [ids, "Once upon a time", {"prompt_string": "Hi"}]})
    assert status == 200 and isinstance(out, list)
    assert [o["content"] for o in out] == [want] + [greedy(model, p).text for p in ("Once upon a time", "Hi")]
    assert [o["index"] for o in out] == [0, 1, 2] and all(o["stop"] for o in out)
    status, out = post_json(srv, "/completion", {"prompt": ["Hi"]})  # one prompt in a list: one body
    assert status == 200 and out["content"] == greedy(model, "Hi").text
    status, out = post_json(srv, "/completion", {"prompt": ids[:1] + [ids[:1]]})  # ids at the top: one prompt
    assert status == 400 and out["error"]["message"].startswith("prompt: a prompt is text, token ids")


def test_stream_chunks_then_a_summary_without_done(srv, model):
    want = greedy(model, "Hello world")
    status, headers, raw = exchange(srv, "POST", "/completion", {"prompt": "Hello world", "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    chunks = events(raw)
    *pieces, last = chunks
    assert b"[DONE]" not in raw
    assert all(c["stop"] is False and c["tokens"] and all(isinstance(t, int) for t in c["tokens"]) for c in pieces)
    assert "".join(c["content"] for c in chunks) == want.text  # the last may carry a tail that had no token
    assert sum(len(c["tokens"]) for c in pieces) <= len(want.tokens)
    assert last["stop"] is True and last["tokens"] == []
    assert last["timings"]["predicted_n"] == len(want.tokens) and last["generation_settings"]["n_predict"] == DEFAULT_N
    status, _, raw = exchange(srv, "POST", "/completion", {"prompt": "Hello", "stream": True,
                                                           "timings_per_token": True})
    *pieces, last = events(raw)
    assert all("predicted_per_second" in c["timings"] for c in pieces)
    assert [c["timings"]["predicted_n"] for c in pieces] == sorted(c["timings"]["predicted_n"] for c in pieces)


def test_id_slot_chooses_the_slot_and_wraps_around(srv):
    for asked, used in ((1, 1), (0, 0), (3, 1)):
        status, out = post_json(srv, "/completion", {"prompt": "Hi", "n_predict": 2, "id_slot": asked})
        assert status == 200 and out["id_slot"] == used
    slots = json.loads(get(srv, "/slots")[1])
    assert slots[1]["params"]["n_predict"] == 2 and slots[1]["id_task"] > slots[0]["id_task"]


def test_completions_without_v1_is_the_native_endpoint(srv):
    status, out = post_json(srv, "/completions", {"prompt": "Hi", "n_predict": 2})
    assert status == 200 and "content" in out and "choices" not in out
    status, out = post_json(srv, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert status == 200 and "choices" in out and out["system_fingerprint"] == BUILD_INFO


def test_every_openai_response_and_chunk_has_the_fingerprint(srv):
    client = srv.client()
    assert client.completions.create(model="x", prompt="Hi", max_tokens=2).system_fingerprint == BUILD_INFO
    chunks = list(client.chat.completions.create(model="x", messages=MESSAGES, max_tokens=3, stream=True,
                                                 stream_options={"include_usage": True}))
    assert len(chunks) > 2 and {c.system_fingerprint for c in chunks} == {BUILD_INFO}
    assert BUILD_INFO.startswith("glm5next-")


# ------------------------------------------------------------------------------------------ props, slots, models

def test_props(srv, model):
    status, out = post_json(srv, "/props", {})
    assert status == 501 and out["error"]["message"] == ("This server does not support changing global "
                                                          "properties. Start it with `--props`")
    status, raw = get(srv, "/props")
    out = json.loads(raw)
    assert status == 200 and out["total_slots"] == 2 and out["model_path"].endswith(".gguf")
    settings = out["default_generation_settings"]
    assert settings["n_ctx"] == SLOT_CTX  # -c 1024 divided among -np 2
    params = settings["params"]
    assert (params["seed"], params["temperature"], params["top_k"], params["n_predict"]) == (42, 0.0, 5, DEFAULT_N)
    assert out["chat_template"] == model.chat_template and out["build_info"] == BUILD_INFO
    assert out["modalities"] == {"vision": False, "audio": False}
    assert (out["endpoint_slots"], out["endpoint_props"], out["endpoint_metrics"]) == (True, False, True)
    assert out["indexer_top_k"] == model.hparams["idx_top_k"] == 16 and out["kv_overrides"] == []


def test_props_and_the_load_log_say_the_effective_top_k_and_the_overrides(locked):
    status, raw = get(locked, "/props", headers=AUTH)
    out = json.loads(raw)
    assert status == 200 and out["indexer_top_k"] == 8
    assert out["kv_overrides"] == ["glm5next.attention.indexer.top_k=int:8"]
    assert ("indexer: top-k 8 keys per query (2 pools of 4; the file's unless overridden); --override-kv applied: "
            "glm5next.attention.indexer.top_k=int:8") in locked.log.read_text()


def test_post_props_with_the_flag_changes_nothing(locked):
    status, out = post_json(locked, "/props", {"anything": 1}, headers=AUTH)
    assert status == 200 and out == {"success": True}


def test_slots_report_each_slot(srv):
    status, raw = get(srv, "/slots")
    slots = json.loads(raw)
    assert status == 200 and [s["id"] for s in slots] == [0, 1]
    assert all(s["n_ctx"] == SLOT_CTX and s["is_processing"] is False and s["speculative"] is False for s in slots)
    status, out = post_json(srv, "/completion", {"prompt": "Hello there", "n_predict": 4, "id_slot": 0})
    slot = json.loads(get(srv, "/slots")[1])[0]
    assert slot["n_prompt_tokens"] == out["tokens_evaluated"]
    assert slot["n_prompt_tokens_processed"] + slot["n_prompt_tokens_cache"] == slot["n_prompt_tokens"]
    assert slot["params"]["n_predict"] == 4
    # the task is over: llama-server resets the slot's budget (nothing decoded, no limit left)
    assert slot["next_token"] == [{"has_next_token": False, "has_new_line": "\n" in out["content"],
                                   "n_remain": -1, "n_decoded": 0}]


def test_a_fresh_slot_has_no_task_and_flags_turn_endpoints_off(model):
    pool = SlotPool([model, model.another_sequence()])
    with TestClient(create_app(pool, ServerConfig(model_name="m"))) as client:
        slots = client.get("/slots").json()
        assert [set(s) for s in slots] == [{"id", "n_ctx", "speculative", "is_processing"}] * 2
        assert client.get("/slots?fail_on_no_slot=1").status_code == 200
        response = client.get("/metrics")  # llama-server serves it only with --metrics
        assert response.status_code == 501 and "Start it with `--metrics`" in response.json()["error"]["message"]
    with TestClient(create_app(pool, ServerConfig(model_name="m", slots_endpoint=False))) as client:
        response = client.get("/slots")
        assert response.status_code == 501 and response.json()["error"] == {
            "code": 501, "type": "not_supported_error",
            "message": "This server does not support slots endpoint. Start it with `--slots`"}


def test_alias_list_and_tags(srv):
    """llama-server keeps the aliases in a sorted set: the id is the first of them, all are listed."""
    status, raw = get(srv, "/v1/models")
    (entry,) = json.loads(raw)["data"]
    assert (entry["id"], entry["aliases"], entry["tags"]) == ("alpha", ["alpha", "zeta"], ["t1"])
    assert srv.client().completions.create(model="zeta", prompt="Hi", max_tokens=1).model == "zeta"


def test_v1_health(srv, locked):
    assert json.loads(get(srv, "/v1/health")[1])["status"] == "ok"
    assert get(locked, "/v1/health")[0] == 200  # public, as /health


def test_the_context_is_split_among_slots_unless_unified(srv, locked):
    status, out = post_json(srv, "/v1/completions", {"prompt": [65] * SLOT_CTX, "max_tokens": 1})
    assert status == 400 and out["error"]["type"] == "exceed_context_size_error" and out["error"]["n_ctx"] == SLOT_CTX
    meta = json.loads(get(locked, "/v1/models")[1])["data"][0]["meta"]
    assert meta["n_ctx"] == SLOT_CTX and meta["slots"] == 2  # --kv-unified: -c 512 for each slot


def test_several_host_addresses_are_all_served(locked):
    for host in ("127.0.0.1", "127.0.0.2"):
        status, _, raw = exchange(locked, "GET", "/health", host=host)
        assert status == 200 and json.loads(raw)["status"] == "ok"


# ------------------------------------------------------------------------------------------ metrics

LLAMACPP_TYPES = {
    "prompt_tokens_total": "counter", "prompt_tokens_cached_total": "counter", "prompt_seconds_total": "counter",
    "tokens_predicted_total": "counter", "tokens_predicted_seconds_total": "counter", "n_decode_total": "counter",
    "n_tokens_max": "counter", "n_busy_slots_per_decode": "gauge", "prompt_tokens_seconds": "gauge",
    "predicted_tokens_seconds": "gauge",
    "requests_processing": "gauge", "requests_deferred": "gauge", "spec_decode_num_draft_tokens_total": "counter",
    "spec_decode_num_accepted_tokens_total": "counter", "spec_decode_num_drafts_total": "counter",
}


def scrape(server: Server) -> tuple[dict[str, str], dict[str, float]]:
    """(TYPE of every metric, value of every sample) from /metrics, as written."""
    status, raw = get(server, "/metrics")
    assert status == 200
    types, values = {}, {}
    for line in raw.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        elif line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return types, values


def test_metrics_have_llama_servers_names_and_types(srv):
    types, before = scrape(srv)
    assert {n[len("llamacpp:"):]: k for n, k in types.items() if n.startswith("llamacpp:")} == LLAMACPP_TYPES
    status, out = post_json(srv, "/completion", {"prompt": "Counting tokens", "n_predict": 5})
    types, after = scrape(srv)
    moved = {name: after[name] - before.get(name, 0.0) for name in after}
    assert moved["llamacpp:prompt_tokens_total"] == out["timings"]["prompt_n"]
    assert moved["llamacpp:prompt_tokens_cached_total"] == out["timings"]["cache_n"]
    assert moved["llamacpp:tokens_predicted_total"] == out["timings"]["predicted_n"] == 5
    assert moved["llamacpp:n_decode_total"] >= 5 and after["llamacpp:n_busy_slots_per_decode"] == 1
    assert after["llamacpp:predicted_tokens_seconds"] > 0 and after["llamacpp:n_tokens_max"] >= 5
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0
    assert moved['glm5next_requests_total{endpoint="completion"}'] == 1
    assert not any(name.startswith("glm5next_prompt") for name in after)  # one home: llama-server's name
    _, again = scrape(srv)  # a scrape starts a new throughput bucket, as in llama-server
    assert again["llamacpp:predicted_tokens_seconds"] == 0


def test_metrics_carry_the_process_start_time_header_spelled_as_llama_server_does(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=TIMEOUT)
    try:
        conn.request("GET", "/metrics", headers={"Origin": "http://localhost:3000"})
        response = conn.getresponse()
        response.read()
        headers = dict(response.getheaders())  # names as sent: clients that read them into a dict look them up so
    finally:
        conn.close()
    assert 0 <= time.time() - int(headers["Process-Start-Time-Unix"]) < 3600
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:3000"


def test_generation_rates_are_over_decode_steps(srv):
    """llama-server: the first token comes with the prompt's logits, so the rates are over one step fewer."""
    status, out = post_json(srv, "/completion", {"prompt": "Counting steps", "n_predict": 1})
    assert status == 200 and out["timings"]["predicted_n"] == 1
    assert out["timings"]["predicted_per_second"] == out["timings"]["predicted_per_token_ms"] == 0.0
    status, out = post_json(srv, "/completion", {"prompt": "Counting steps", "n_predict": 6})
    t = out["timings"]
    assert t["predicted_n"] == 6 and t["predicted_ms"] > 0
    assert t["predicted_per_second"] == pytest.approx(1e3 / t["predicted_ms"] * 5)
    assert t["predicted_per_token_ms"] == pytest.approx(t["predicted_ms"] / 5)


# ------------------------------------------------------------------------------------------ CORS

def test_cors_preflight_is_answered_without_the_key(locked):
    status, headers, body = exchange(locked, "OPTIONS", "/completions", headers={
        "Origin": "web.mydomain.fr", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "Authorization"})
    assert status == 200 and body == b""
    assert headers["access-control-allow-origin"] == "web.mydomain.fr"
    assert headers["access-control-allow-credentials"] == "true"
    assert headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"  # llama-server's defaults
    assert headers["access-control-allow-headers"] == "*"


def cors_headers(flags: list[str], method: str, origin: str | None) -> dict[bytes, bytes]:
    """The headers, names as sent, that CORSMiddleware (with the policy `flags` give) adds to a request's answer."""
    args = parse_args(["-m", "x.gguf", *flags])
    policy = CORSPolicy(args.cors_origins, args.cors_methods, args.cors_headers, args.cors_credentials)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    sent = []

    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": method, "headers": [] if origin is None else [(b"origin", origin.encode())]}
    asyncio.run(CORSMiddleware(app, policy)(scope, None, send))
    return {k: v for k, v in sent[0]["headers"] if k.startswith(b"Access-")}


@pytest.mark.parametrize("origin, reflected", [
    ("http://localhost", True), ("http://localhost:8080", True), ("http://127.0.0.1:3000", True),
    ("http://[::1]:3000", True), ("http://evil.com", False), ("http://localhost.evil.com", False),
    ("http://notlocalhost", False), ("not a url", False)])
def test_cors_origins_localhost_reflects_only_loopback_origins(origin, reflected):
    for method in ("OPTIONS", "GET"):
        headers = cors_headers(["--cors-origins", "localhost"], method, origin)
        assert headers.get(b"Access-Control-Allow-Origin") == (origin.encode() if reflected else None)


def test_cors_flags_and_header_names_as_llama_server_spells_them():
    assert cors_headers([], "OPTIONS", "http://a.b") == {
        b"Access-Control-Allow-Origin": b"http://a.b", b"Access-Control-Allow-Credentials": b"true",
        b"Access-Control-Allow-Methods": b"GET, POST, DELETE, OPTIONS", b"Access-Control-Allow-Headers": b"*"}
    assert cors_headers([], "GET", None) == {}
    flags = ["--no-cors-credentials", "--cors-methods", "GET", "--cors-headers", "Authorization"]
    assert cors_headers(flags, "OPTIONS", "http://a.b") == {
        b"Access-Control-Allow-Origin": b"*", b"Access-Control-Allow-Credentials": b"false",
        b"Access-Control-Allow-Methods": b"GET", b"Access-Control-Allow-Headers": b"Authorization"}
    assert cors_headers(["--cors-origins", "https://ui.example"], "GET", "http://a.b") == {
        b"Access-Control-Allow-Origin": b"https://ui.example"}


def test_responses_reflect_the_origin(locked):
    status, headers, _ = exchange(locked, "GET", "/health", headers={"Origin": "http://localhost:3000"})
    assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:3000"
    status, headers, _ = exchange(locked, "POST", "/completion", {"prompt": "x"}, headers={"Origin": "http://a.b"})
    assert status == 401 and headers["access-control-allow-origin"] == "http://a.b"  # the page can read the error
    assert "access-control-allow-origin" not in exchange(locked, "GET", "/health")[1]


# ------------------------------------------------------------------------------------------ flags

@pytest.mark.parametrize("flags, message", [
    (["--context-shift"], "--context-shift: not supported"),
    (["--repeat-penalty", "1.1"], "--repeat-penalty 1.1: not supported"),
    (["--presence-penalty", "0.5"], "--presence-penalty 0.5: not supported"),
    (["--frequency-penalty", "-1"], "--frequency-penalty -1.0: not supported"),
    (["-c", "1", "-np", "2"], "-c 1 -np 2: each slot would get no context"),
    (["--chat-template", "vicuna"], "--chat-template 'vicuna': not a built-in template"),
    (["--no-jinja", "--chat-template-file", "t.jinja"], "--chat-template-file: needs --jinja"),
    (["--top-p", "0"], "--top-p 0.0: must be in (0, 1]"),
    (["-n", "-2"], "-n/--n-predict -2: must be >= -1"),
    (["-ctk", "q5_0"], "-ctk/--cache-type-k: invalid choice: 'q5_0' (choose from 'f16', 'bf16', 'f32', 'q8_0', 'q4_0')"),
])
def test_flags_the_engine_cannot_honour_exit_2_naming_them(flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["-m", "x.gguf", *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_neutral_and_no_effect_flags_are_accepted():
    args = parse_args(["-m", "x.gguf", "--repeat-penalty", "1", "--presence-penalty", "0", "--repeat-last-n", "128",
                       "--no-context-shift", "-fa", "on", "-ub", "256", "--no-slots", "-no-kvu", "--verbose",
                       "--chat-template", "chatml"])
    assert (args.slots, args.kv_unified, args.context_shift, args.flash_attn, args.ubatch_size) == (
        False, False, False, "on", 256)


def test_cache_types_reach_the_model_and_ctv_changes_nothing():
    """-ctk sets the attention caches' type; -ctv, which llama-server command lines carry, is taken and changes
    nothing (MLA keeps one latent for keys and values)."""
    from glm5next_runtime.model_args import model_kwargs
    assert model_kwargs(parse_args(["-m", "x.gguf"]))["cache_type_k"] == "f16"
    args = parse_args(["-m", "x.gguf", "-ctk", "bf16", "-ctv", "q8_0"])
    assert model_kwargs(args)["cache_type_k"] == "bf16" and "cache_type_v" not in model_kwargs(args)


def test_help_groups_flags_as_llama_server(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    assert out.index("common params:") < out.index("sampling params:") < out.index("server-specific params:")
    assert out.index("sampling params:") < out.index("--temp N, --temperature N") < out.index("server-specific params:")


@pytest.mark.parametrize("budget, fmt", [(-1, None), (0, None), (-1, "none")])
def test_reasoning_flags_are_the_requests_defaults(model, budget, fmt):
    """--reasoning-budget 0 turns thinking off unless a request turns it on; --reasoning-format none leaves the
    reasoning in content (llama-server's flags)."""
    from glm5next_runtime.server.main import chat_template
    from glm5next_runtime.server.args import parse_args
    from glm5next_runtime.server.request_defaults import RequestDefaults
    template = chat_template(model, parse_args(["-m", model.path]))
    config = ServerConfig(model_name="m", chat_template=template,
                          sampling=RequestDefaults(reasoning_format=fmt, reasoning_budget=budget))
    try:
        with TestClient(create_app(SlotPool([model]), config)) as client:
            chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}
            prompt = client.post("/apply-template", json=chat).json()["prompt"]
            assert prompt.endswith("<think></think>\n") == (budget == 0)
            on = chat | {"chat_template_kwargs": {"enable_thinking": True}}
            assert client.post("/apply-template", json=on).json()["prompt"].endswith("<think>")
            message = client.post("/v1/chat/completions", json=chat).json()["choices"][0]["message"]
            assert ("reasoning_content" in message) == (budget == -1 and fmt is None)
    finally:
        template.close()


def test_reasoning_budget_takes_llama_servers_two_values():
    from glm5next_runtime.server.args import parse_args
    with pytest.raises(SystemExit):
        parse_args(["-m", "x.gguf", "--reasoning-budget", "512"])


@pytest.mark.parametrize("server_verbose, asked, carries", [(True, None, True), (True, False, False),
                                                            (False, None, False), (False, True, True)])
def test_the_servers_verbose_flag_makes_verbose_the_default(model, server_verbose, asked, carries):
    """-v, as llama-server's --verbose: every response that is not streamed carries __verbose unless the request
    says verbose false (their test_chat_template_assistant_prefill reads the prompt from it)."""
    from glm5next_runtime.server.main import chat_template
    from glm5next_runtime.server.args import parse_args
    from glm5next_runtime.server.request_defaults import RequestDefaults
    args = parse_args(["-m", model.path] + (["-v"] if server_verbose else []))
    template = chat_template(model, args)
    config = ServerConfig(model_name="m", chat_template=template, sampling=RequestDefaults(verbose=args.verbose))
    try:
        with TestClient(create_app(SlotPool([model]), config)) as client:
            chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0} | (
                {} if asked is None else {"verbose": asked})
            assert ("__verbose" in client.post("/v1/chat/completions", json=chat).json()) == carries
    finally:
        template.close()
