"""glm5next-server (issue 5): the real server in a subprocess on a free loopback port, driven by the openai client
and by raw HTTP for what the client cannot send.

Two servers per module: `spec` serves the "predictable" file (NextN layer: draft-mtp on by default, drafts get
accepted) with 2 slots; `plain` serves a tiny file without a NextN layer (speculation off by default) with 1 slot,
an --api-key, an --alias and --no-jinja. Greedy text is compared with the Python API on the same file, so the
server adds nothing and loses nothing. Start-up failures run server.main in-process (uvicorn.run replaced by a
recorder, so that nothing is served) and once as a real process. Every request has a timeout, every wait is
bounded, and the servers are stopped (killed if need be) in teardown."""
from __future__ import annotations

import http.client
import json
import logging
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

import glm5next_runtime.server.main as server_module
from glm5next_runtime import Model
from glm5next_runtime.chat import split_reasoning
from live_server import N_CTX, SERVER, TIMEOUT, Server, free_port, get, post_json

API_KEY = "sk-test-key"
ALIAS = "glm-tiny"
PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time", "A B C D", "tell me a story",
           "1 2 3 4 5", "zebra crossing", "what is the answer"]


def metrics(server: Server, **kw) -> dict[str, float]:
    """Sample name (with labels) -> value."""
    status, text = get(server, "/metrics", **kw)
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def wait_idle(server: Server, slots: int, limit: float = 15.0, **kw) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if json.loads(get(server, "/health", **kw)[1])["slots_idle"] == slots:
            return
        time.sleep(0.05)
    pytest.fail(f"slots still busy after {limit} s")


@pytest.fixture(scope="module")
def spec(predictable_gguf, tmp_path_factory):
    # fixed draft lengths (as spec_model): seeded sampled text depends on them, and the metrics tests need drafts
    server = Server(predictable_gguf, tmp_path_factory.mktemp("spec") / "server.log", "-np", "2", "--metrics",
                    "--spec-draft-adaptive", "off", n_ctx=2 * N_CTX)  # the slots share -c: N_CTX each
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain(plain_gguf, tmp_path_factory):
    server = Server(plain_gguf, tmp_path_factory.mktemp("plain") / "server.log", "--api-key", API_KEY,
                    "--alias", ALIAS, "--no-jinja", "--metrics")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def spec_model(predictable_gguf) -> Model:
    return Model(predictable_gguf, n_ctx=N_CTX, n_threads=1, draft_adaptive=False)


@pytest.fixture(scope="module")
def plain_model(plain_gguf) -> Model:
    return Model(plain_gguf, n_ctx=N_CTX, n_threads=1)


def name(model: Model) -> str:
    """The model name the server lists for the file of `model`."""
    return Path(model.path).name


def greedy(model: Model, prompt: str, n: int = 24, **kw):
    return model.generate(prompt, max_tokens=n, temperature=0, **kw)


# ------------------------------------------------------------------------------------------ start-up and info

def test_start_up_log_says_speculation_and_placement(spec, plain):
    spec_log, plain_log = spec.log.read_text(), plain.log.read_text()
    assert "speculation: draft-mtp" in spec_log and "placement: CPU:" in spec_log
    assert "speculation: none (the file has no NextN layer)" in plain_log


def test_health_and_models(spec, plain, predictable_gguf):
    status, body = get(spec, "/health")
    assert status == 200 and json.loads(body) == {"status": "ok", "slots_idle": 2, "slots_processing": 0}
    assert [m.id for m in spec.client().models.list()] == [predictable_gguf.name]
    assert [m.id for m in plain.client(API_KEY).models.list()] == [ALIAS]


# ------------------------------------------------------------------------------------------ completions

@pytest.mark.parametrize("extra, drafts", [({}, True), ({"speculative": {"n_max": 0}}, False),
                                           ({"speculative.n_max": 0}, False), ({"speculative": {"n_max": 1}}, True)])
def test_completion_greedy_equals_python_api(spec, spec_model, extra, drafts):
    want = greedy(spec_model, PROMPTS[0])
    got = spec.client().completions.create(model=name(spec_model), prompt=PROMPTS[0], max_tokens=24,
                                           temperature=0, extra_body=extra)
    assert got.choices[0].text == want.text
    assert got.choices[0].finish_reason == want.finish_reason == "length"
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (want.metrics["n_prompt_tokens"], 24)
    assert got.usage.total_tokens == got.usage.prompt_tokens + 24
    timings = got.model_extra["timings"]
    # the same prompt again resumes all of it (its end keeps its logits): evaluated + resumed = the prompt
    assert timings["prompt_n"] + timings["cache_n"] == got.usage.prompt_tokens and timings["predicted_n"] == 24
    assert timings["predicted_per_second"] > 0 and (timings["prompt_per_second"] > 0) == (timings["prompt_n"] > 0)
    assert (timings["draft_n"] > 0) == drafts and (timings["draft_n_accepted"] > 0) == drafts


def test_completion_stream_equals_python_api(spec, spec_model):
    want = greedy(spec_model, PROMPTS[1])
    chunks = list(spec.client().completions.create(model=name(spec_model), prompt=PROMPTS[1], max_tokens=24,
                                                   temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == want.text
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert last.choices[0].finish_reason == "length"
    assert last.usage is None  # only with stream_options.include_usage (test_server_fields.py)
    assert last.model_extra["timings"]["predicted_n"] == 24 and last.model_extra["timings"]["draft_n"] > 0


def test_token_prompt(spec, spec_model):
    ids = spec_model.tokenize(PROMPTS[2], add_special=True)
    status, body = post_json(spec, "/v1/completions", {"prompt": ids, "max_tokens": 12, "temperature": 0})
    assert status == 200 and body["choices"][0]["text"] == greedy(spec_model, PROMPTS[2], 12).text


def test_plain_server_greedy_equals_python_api(plain, plain_model):
    client = plain.client(API_KEY)
    for prompt in PROMPTS[:3]:
        want = greedy(plain_model, prompt)
        got = client.completions.create(model=ALIAS, prompt=prompt, max_tokens=24, temperature=0)
        assert (got.choices[0].text, got.choices[0].finish_reason) == (want.text, want.finish_reason)
        assert got.model_extra["timings"]["draft_n"] == 0


def test_stop_strings_and_seed(spec, spec_model):
    client = spec.client()
    full = greedy(spec_model, PROMPTS[3], 40).text
    stop = next(full[i:i + 2] for i in range(len(full) // 3, len(full) - 2) if "\ufffd" not in full[i:i + 2])
    got = client.completions.create(model=name(spec_model), prompt=PROMPTS[3], max_tokens=40, temperature=0,
                                    stop=[stop])
    assert got.choices[0].text == full[:full.find(stop)] and got.choices[0].finish_reason == "stop"

    sampled = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    want = spec_model.generate(PROMPTS[3], max_tokens=16, seed=5, **sampled).text
    for _ in range(2):
        status, body = post_json(spec, "/v1/completions", {"prompt": PROMPTS[3], "max_tokens": 16, "seed": 5,
                                                           **sampled})
        assert status == 200 and body["choices"][0]["text"] == want


# ------------------------------------------------------------------------------------------ chat

RENDERED = "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think>"  # the generated checkpoints' template
MESSAGES = [{"role": "user", "content": "Hi there"}]


def test_chat_splits_reasoning(spec, spec_model):
    want_reasoning, want_content = split_reasoning(greedy(spec_model, RENDERED).text)
    client = spec.client()
    got = client.chat.completions.create(model=name(spec_model), messages=MESSAGES, max_tokens=24,
                                         temperature=0)
    message = got.choices[0].message
    assert (message.model_extra["reasoning_content"], message.content) == (want_reasoning, want_content)
    assert got.usage.completion_tokens == 24 and "timings" in got.model_extra

    chunks = list(client.chat.completions.create(model=name(spec_model), messages=MESSAGES,
                                                 max_tokens=24, temperature=0, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    kinds = [("reasoning" if "reasoning_content" in (c.choices[0].delta.model_extra or {}) else "content")
             for c in chunks[1:-1]]
    assert kinds == sorted(kinds, key=lambda k: k == "content")  # reasoning deltas first, then content
    reasoning = "".join(c.choices[0].delta.model_extra.get("reasoning_content", "") for c in chunks[1:-1])
    content = "".join(c.choices[0].delta.content or "" for c in chunks[1:-1])
    assert (reasoning, content) == (want_reasoning, want_content)
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].model_extra["timings"]["predicted_n"] == 24


def test_chat_without_thinking_has_no_reasoning(spec, spec_model):
    want = greedy(spec_model, "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think></think>\n")
    status, body = post_json(spec, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
        "max_tokens": 24, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": want.text}


# ------------------------------------------------------------------------------------------ concurrency

def test_concurrent_clients_get_their_own_text(spec, spec_model):
    want = {p: greedy(spec_model, p, 32).text for p in PROMPTS}
    client = spec.client()

    def ask(i: int) -> tuple[str, str]:
        prompt = PROMPTS[i]
        kwargs = dict(model=name(spec_model), prompt=prompt, max_tokens=32, temperature=0)
        if i % 2:
            return prompt, "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs))
        return prompt, client.completions.create(**kwargs).choices[0].text

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        got = dict(pool.map(ask, range(len(PROMPTS)), timeout=4 * TIMEOUT))
    assert got == want
    wait_idle(spec, 2)


# ------------------------------------------------------------------------------------------ metrics

def test_metrics_move(spec, spec_model):
    before = metrics(spec)
    got = spec.client().completions.create(model=name(spec_model), prompt=PROMPTS[4] + " and the metrics",
                                           max_tokens=20, temperature=0)  # a prompt no other test sends
    after = metrics(spec)

    def moved(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    timings = got.model_extra["timings"]
    assert moved("llamacpp:prompt_tokens_total") == timings["prompt_n"]  # evaluated: cached ones are not
    assert moved("llamacpp:tokens_predicted_total") == 20
    assert moved("glm5next_requests_total{endpoint=completions}") == 1
    assert moved("llamacpp:spec_decode_num_draft_tokens_total") == timings["draft_n"] > 0
    assert moved("llamacpp:spec_decode_num_accepted_tokens_total") == timings["draft_n_accepted"]
    drafts = moved("llamacpp:spec_decode_num_drafts_total")
    assert drafts > 0
    assert after["llamacpp:predicted_tokens_seconds"] > 0 and after["llamacpp:prompt_tokens_seconds"] > 0
    assert after["glm5next_spec_mean_accepted_length"] > 1
    assert 0 < after["glm5next_spec_acceptance_rate{position=1}"] <= 1
    assert moved("glm5next_spec_position_drafted_total{position=1}") == drafts
    # fixed lengths (--spec-draft-adaptive off, p_min 0): n_max drafts a round but where the 20-token limit cuts a
    # round short, and every round allowed drafts drafted
    assert moved("glm5next_spec_rounds_total{drafts=3}") > 0
    allowed = {name for name in after if name.startswith("glm5next_spec_rounds_total{drafts=")}
    assert sum(moved(name) for name in allowed if not name.endswith("drafts=0}")) == drafts
    assert 0 < moved("llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=1}") <= drafts
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0


# ------------------------------------------------------------------------------------------ bad input

BAD = [
    (b'{"prompt": "Hello", "max_tokens": 4', 400, "invalid_request_error"),  # malformed JSON
    (b'[1, 2]', 400, "invalid_request_error"),
    ({"prompt": 5}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "max_tokens": "5"}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "temperature": "hot"}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "max_tokens": -2}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "top_p": 0}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "stop": [""]}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "n": 17}, 400, "invalid_request_error"),  # past MAX_CHOICES
    ({"prompt": "Hello", "n": 2, "stream": True}, 400, "invalid_request_error"),  # several choices: not streamed
    ({"prompt": "Hello", "speculative": {"n_max": -1}}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "speculative.n_max": 4096}, 400, "invalid_request_error"),  # >= n_batch
    ({"prompt": ""}, 400, "invalid_request_error"),
    ({"prompt": [1, 100000]}, 400, "invalid_request_error"),
    ({"prompt": "hello " * N_CTX}, 400, "exceed_context_size_error"),
    ({"prompt": "Hello", "top_k": 2**31}, 400, "invalid_request_error"),  # past the engine's int32
    ({"prompt": "Hello", "seed": 2**64}, 400, "invalid_request_error"),  # past its uint64
    ({"prompt": "Hello", "speculative.n_max": 2**31}, 400, "invalid_request_error"),
    ({"prompt": "Hello", "speculative": {"n_max": 2**31}}, 400, "invalid_request_error"),
]


@pytest.mark.parametrize("body, status, kind", BAD, ids=range(len(BAD)))
def test_bad_completion_requests_get_openai_errors(spec, body, status, kind):
    got, out = post_json(spec, "/v1/completions", body)
    assert got == status
    assert set(out) == {"error"} and out["error"]["type"] == kind and out["error"]["code"] == status
    assert isinstance(out["error"]["message"], str) and out["error"]["message"]


BAD_CHAT = [
    ({"messages": "hi"}, 400),
    ({"messages": []}, 400),
    ({"messages": [{"content": "no role"}]}, 400),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}, 400),
    ({"messages": MESSAGES, "max_completion_tokens": -3}, 400),
]


@pytest.mark.parametrize("body, status", BAD_CHAT, ids=range(len(BAD_CHAT)))
def test_bad_chat_requests_get_openai_errors(spec, body, status):
    got, out = post_json(spec, "/v1/chat/completions", body)
    assert got == status and set(out["error"]) >= {"message", "type", "code"}


@pytest.mark.parametrize("field, value", [("top_k", 2**31), ("top_k", 10**30), ("seed", 2**64), ("seed", -2**64),
                                          ("speculative.n_max", 2**31), ("max_tokens", -5), ("temperature", "hot")])
def test_out_of_range_numbers_are_400s_naming_the_field(spec, field, value):
    status, out = post_json(spec, "/v1/completions", {"prompt": "Hello", field: value})
    assert status == 400 and out["error"]["message"].startswith(f"{field}: ")
    assert "0x" not in out["error"]["message"] and "_core" not in out["error"]["message"]


def test_context_error_names_the_sizes(spec):
    status, out = post_json(spec, "/v1/completions", {"prompt": "hello " * N_CTX})
    assert status == 400 and out["error"]["n_ctx"] == N_CTX and out["error"]["n_prompt_tokens"] >= N_CTX


def test_openai_client_raises_on_bad_input(spec, spec_model):
    client = spec.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=name(spec_model), prompt="hello " * N_CTX)
    assert e.value.body["type"] == "exceed_context_size_error"


def test_unknown_route_and_method(spec):
    status, body = get(spec, "/v1/nothing")
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"
    status, body = get(spec, "/v1/completions")
    assert status == 405 and set(json.loads(body)["error"]) == {"code", "message", "type"}


def test_api_key(plain):
    assert get(plain, "/health")[0] == 200  # public, as in llama-server
    assert get(plain, "/v1/models")[0] == 200
    body = {"prompt": "Hello", "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
        status, out = post_json(plain, "/v1/completions", body, headers=headers)
        assert status == 401 and out["error"]["type"] == "authentication_error"
    assert get(plain, "/metrics")[0] == 401
    status, out = post_json(plain, "/v1/completions", b"{not json", headers={})
    assert status == 401  # nothing is parsed before the key is checked
    for headers in ({"Authorization": f"Bearer {API_KEY}"}, {"X-Api-Key": API_KEY}):
        assert post_json(plain, "/v1/completions", body, headers=headers)[0] == 200
    with pytest.raises(openai.AuthenticationError):
        plain.client("wrong").completions.create(model=ALIAS, prompt="Hello", max_tokens=2)
    assert get(plain, "/metrics", headers={"Authorization": f"Bearer {API_KEY}"})[0] == 200


def test_server_still_serves_after_bad_input(spec):
    assert get(spec, "/health")[0] == 200
    wait_idle(spec, 2)


# ------------------------------------------------------------------------------------------ disconnects

def open_stream(server: Server, prompt: str) -> http.client.HTTPConnection:
    """A greedy stream long enough (thousands of tokens) to outlive the test unless the server cuts it; returns
    the connection after its first event arrived."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": N_CTX, "temperature": 0,
                                                        "stream": True}), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b"data: ")
    return conn


def test_disconnected_streams_free_their_slots(spec, spec_model):
    before = metrics(spec)
    conns = [open_stream(spec, p) for p in PROMPTS[:2]]  # both slots busy
    for conn in conns:
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
    wait_idle(spec, 2)
    got = spec.client().completions.create(model=name(spec_model), prompt=PROMPTS[5],
                                           max_tokens=8, temperature=0)
    assert got.choices[0].text == greedy(spec_model, PROMPTS[5], 8).text
    after = metrics(spec)
    # the cut streams never finished: only the last request was counted
    assert after["glm5next_requests_total{endpoint=completions}"] - \
        before["glm5next_requests_total{endpoint=completions}"] == 1
    assert after["glm5next_requests_cancelled_total"] - before["glm5next_requests_cancelled_total"] == 2


def send_plain(server: Server, prompt: str) -> http.client.HTTPConnection:
    """A greedy request, not streamed, long enough (thousands of tokens) to outlive the test unless the server
    drops it; its response is never read."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": N_CTX, "temperature": 0}),
                 {"Content-Type": "application/json"})
    return conn


def hang_up(conn: http.client.HTTPConnection) -> None:
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()


def wait_until(server: Server, metric: str, value: float, limit: float = 15.0) -> None:
    deadline = time.monotonic() + limit
    while metrics(server)[metric] != value:
        if time.monotonic() > deadline:
            pytest.fail(f"{metric} is not {value} after {limit} s")
        time.sleep(0.02)


def test_plain_requests_whose_clients_left_are_dropped_running_or_queued(spec, spec_model):
    """A running generation stops at its next piece of text and frees its slot; a request queued for a slot leaves
    the queue without running. Each counts as cancelled, none as finished."""
    before = metrics(spec)
    running = [send_plain(spec, p) for p in PROMPTS[:2]]
    wait_until(spec, "llamacpp:requests_processing", 2)
    queued = send_plain(spec, PROMPTS[2])
    wait_until(spec, "llamacpp:requests_deferred", 1)
    hang_up(queued)
    wait_until(spec, "llamacpp:requests_deferred", 0, limit=2.0)
    for conn in running:
        hang_up(conn)
    wait_idle(spec, 2, limit=2.0)  # a whole generation takes seconds
    after = metrics(spec)

    def moved(name: str) -> float:
        return after[name] - before[name]

    assert moved("glm5next_requests_cancelled_total") == 3
    assert moved("glm5next_requests_total{endpoint=completions}") == moved("llamacpp:tokens_predicted_total") == 0
    got = spec.client().completions.create(model=name(spec_model), prompt=PROMPTS[5], max_tokens=8, temperature=0)
    assert got.choices[0].text == greedy(spec_model, PROMPTS[5], 8).text


def test_no_jinja_chats_with_a_builtin_template(plain, plain_model):
    """llama-server keeps chat on with --no-jinja: GLM's built-in format (builtin_templates.py)."""
    status, out = post_json(plain, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8, "temperature": 0},
                            headers={"Authorization": f"Bearer {API_KEY}"})
    want = greedy(plain_model, "[gMASK]<sop><|user|>\nHi there<|assistant|>\n", 8)
    assert status == 200 and out["choices"][0]["message"]["content"] == want.text


# ------------------------------------------------------------------------------------------ start-up failures

@pytest.fixture
def no_serving(monkeypatch):
    """server.main with uvicorn.run replaced: records the app instead of binding a port."""
    served = []
    monkeypatch.setattr(server_module.uvicorn, "run", lambda app, **kw: served.append((app, kw)))
    return served


@pytest.mark.parametrize("flags, message", [
    (["--spec-draft-type", "q5_k"], "invalid choice"),
    (["--spec-type", "eagle"], "invalid choice"),
    (["-np", "0"], "-np/--parallel 0: must be >= 1"),
    (["-c", "many"], "invalid int value"),
    (["--api-key", ""], "--api-key: the key is empty"),  # it used to turn authentication off
    (["--api-key", "ключ"], "--api-key: the key has characters outside Latin-1"),  # it could never match
    (["--api-key", "sk-\x01"], "--api-key: the key has control characters"),
    (["--api-key", "sk-key "], "--api-key: the key starts or ends with a space"),
    (["--max-body-mib", "0"], "--max-body-mib 0: must be >= 1"),
])
def test_usage_errors_exit_2(predictable_gguf, no_serving, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        server_module.main(["-m", str(predictable_gguf), *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err and not no_serving


@pytest.mark.parametrize("flags, message", [
    (["--override-kv", "glm5next.attention.indexer.top_k=int:lots"], "--override-kv"),
    (["--override-kv", "no-equals-sign"], "expected KEY=TYPE:VALUE"),
    (["-ot", "exps=NPU7"], "unknown device 'NPU7'"),
    (["-c", "0"], "n_ctx = 0"),
    (["-md", "/no/such/draft.gguf"], "draft.gguf"),
])
def test_load_errors_exit_1_before_serving(predictable_gguf, no_serving, capsys, flags, message):
    assert server_module.main(["-m", str(predictable_gguf), *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith("glm5next-server: error: ") and message in err and not no_serving


def test_missing_file_and_speculation_without_nextn(plain_gguf, no_serving, capsys):
    assert server_module.main(["-m", "/no/such/file.gguf"]) == 1
    assert "no such file" in capsys.readouterr().err
    assert server_module.main(["-m", str(plain_gguf), "--spec-type", "draft-mtp"]) == 1
    assert "needs a NextN layer" in capsys.readouterr().err and not no_serving


def test_spec_type_none_is_logged(predictable_gguf, no_serving, caplog):
    caplog.set_level(logging.INFO, logger="glm5next.server")
    assert server_module.main(["-m", str(predictable_gguf), "-t", "1", "-c", "64", "--spec-type", "none",
                               "--host", "127.0.0.2", "--port", "9"]) == 0
    assert "speculation: none (--spec-type none)" in caplog.text
    (_app, kw), = no_serving
    assert (kw["host"], kw["port"]) == ("127.0.0.2", 9)


def test_bad_override_kv_process_exits_without_binding(predictable_gguf):
    port = free_port()
    run = subprocess.run([str(SERVER), "-m", str(predictable_gguf), "--port", str(port),
                          "--override-kv", "glm5next.attention.indexer.top_k=str"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 1 and "--override-kv" in run.stderr and "Uvicorn running" not in run.stderr


def test_a_chat_resumes_from_the_slot_cache_and_answers_the_same(spec):
    """Each turn resends the conversation: the slot resumes from its cached prefix (timings.cache_n, usage's
    cached_tokens) and evaluates only the rest; the same turns with cache_prompt false evaluate everything and
    answer the same."""
    messages = [{"role": "system", "content": "You are terse. " * 40}, {"role": "user", "content": "question 1"}]
    turns = []
    for turn in range(3):
        body = {"messages": messages, "max_tokens": 8, "temperature": 0}
        status, hit = post_json(spec, "/v1/chat/completions", body)
        assert status == 200
        assert hit["timings"]["cache_n"] + hit["timings"]["prompt_n"] == hit["usage"]["prompt_tokens"]
        assert hit["usage"]["prompt_tokens_details"]["cached_tokens"] == hit["timings"]["cache_n"]
        turns.append((body, hit))
        messages = messages + [hit["choices"][0]["message"], {"role": "user", "content": f"question {turn + 2}"}]
    for i, (body, hit) in enumerate(turns[1:], 1):  # resumed at least the prompt of the turn before
        assert hit["timings"]["cache_n"] >= turns[i - 1][1]["usage"]["prompt_tokens"] - 1
    for body, hit in turns:
        status, miss = post_json(spec, "/v1/chat/completions", body | {"cache_prompt": False})
        assert status == 200 and miss["timings"]["cache_n"] == 0
        assert miss["choices"][0]["message"]["content"] == hit["choices"][0]["message"]["content"]


def test_interleaved_chats_each_find_their_own_slot(spec):
    """Two conversations on two slots, in the order Ann, Bob, Bob, Ann: each turn goes to the slot holding its
    conversation (the longest common prefix; the least recently used slot would be the wrong one for Bob's second
    turn), resumes there, and answers as a request without the cache does."""
    chats = {name: [{"role": "system", "content": f"You are {name}. " * 30}, {"role": "user", "content": "hello"}]
             for name in ("Ann", "Bob")}
    answers = []
    for i, name in enumerate(["Ann", "Bob", "Bob", "Ann"]):
        body = {"messages": chats[name], "max_tokens": 6, "temperature": 0}
        status, out = post_json(spec, "/v1/chat/completions", body)
        assert status == 200
        if i >= 2:
            assert out["timings"]["cache_n"] > 60, (name, out["timings"])  # its own system prompt, at least
        answers.append((body, out["choices"][0]["message"]["content"]))
        chats[name] = chats[name] + [out["choices"][0]["message"], {"role": "user", "content": "and then?"}]
    for body, content in answers:
        status, miss = post_json(spec, "/v1/chat/completions", body | {"cache_prompt": False})
        assert status == 200 and miss["choices"][0]["message"]["content"] == content
