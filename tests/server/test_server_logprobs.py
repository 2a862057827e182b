"""Log-probabilities through the server (issue 13, docs/server-fields.md): chat `logprobs`/`top_logprobs`,
completions `logprobs: N` (OpenAI's legacy shape), llama-server's `n_probs` on /v1 and its native
`completion_probabilities`, streamed and not; the values are Model.generate(..., logprobs=N)'s, greedy tokens have
the top logprob, and speculation changes nothing.

One server (default: draft-MTP) on the f32 `predictable` file, where drafts are often accepted; requests with
`"speculative.n_max": 0` run on it without speculation."""
from __future__ import annotations

import json

import numpy as np
import pytest

from glm5next_runtime import Model
from live_server import N_CTX, Server, post_json, request

PROMPT = "Once upon a time"  # the predictable file continues it for more than N tokens
MESSAGES = [{"role": "user", "content": "Hi there"}]
RENDERED = "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think>"  # MESSAGES in the generated checkpoints' template
N = 16  # tokens per request
TOP = 3
PLAIN = {"speculative.n_max": 0}


@pytest.fixture(scope="module")
def server(predictable_gguf, tmp_path_factory):
    # fixed draft lengths: the speculation test counts accepted drafts, and adaptive lengths follow timings
    log = tmp_path_factory.mktemp("logprobs") / "server.log"
    server = Server(predictable_gguf, log, "--spec-draft-adaptive", "off")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def model(predictable_gguf) -> Model:
    return Model(predictable_gguf, n_ctx=N_CTX, n_threads=1)


def piece(model: Model, token: int) -> str:
    """A token's text as the server shows it (no --special: control tokens are empty)."""
    return model.tokenizer.token_to_piece(token, False).decode("utf-8", errors="replace")


def chat(server: Server, stream: bool, **fields) -> tuple[list[dict], dict]:
    """The logprobs `content` entries of a greedy chat (a stream's chunks joined) and its timings."""
    body = {"messages": MESSAGES, "max_tokens": N, "temperature": 0, "stream": stream} | fields
    if not stream:
        status, out = post_json(server, "/v1/chat/completions", body)
        assert status == 200, out
        return out["choices"][0]["logprobs"]["content"], out["timings"]
    chunks = sse(server, "/v1/chat/completions", body)
    return [e for c in chunks for e in (c["choices"][0]["logprobs"] or {}).get("content", [])], chunks[-1]["timings"]


def completion(server: Server, stream: bool, **fields) -> tuple[dict[str, list], dict]:
    """The logprobs of a greedy completion (a stream's chunks' lists joined) and its timings."""
    body = {"prompt": PROMPT, "max_tokens": N, "temperature": 0, "stream": stream} | fields
    if not stream:
        status, out = post_json(server, "/v1/completions", body)
        assert status == 200, out
        return out["choices"][0]["logprobs"], out["timings"]
    chunks = sse(server, "/v1/completions", body)
    joined: dict[str, list] = {}
    for c in chunks:
        for key, values in (c["choices"][0]["logprobs"] or {}).items():
            joined.setdefault(key, []).extend(values)
    return joined, chunks[-1]["timings"]


def sse(server: Server, path: str, body: dict) -> list[dict]:
    """The JSON events of a stream, [DONE] excluded."""
    status, raw = request(server, "POST", path, json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert status == 200, raw
    return [json.loads(line[len(b"data: "):]) for line in raw.split(b"\n") if line.startswith(b"data: {")]


def assert_entries_match(model: Model, got: list[dict], want) -> None:
    """Server entries (OpenAI chat shape with llama-server's ids) equal the Python API's TokenLogprob entries."""
    assert [e["id"] for e in got] == [w.token for w in want]
    for e, w in zip(got, want):
        assert e["token"] == piece(model, w.token)
        assert e["bytes"] == list(model.tokenizer.token_to_piece(w.token, False))
        assert e["logprob"] == pytest.approx(w.logprob, abs=1e-6)
        assert [t["id"] for t in e["top_logprobs"]] == [t for t, _ in w.top]
        assert [t["logprob"] for t in e["top_logprobs"]] == pytest.approx([lp for _, lp in w.top], abs=1e-6)
        assert [t["token"] for t in e["top_logprobs"]] == [piece(model, t) for t, _ in w.top]


# ------------------------------------------------------------------------------------------ chat

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_chat_logprobs_are_the_python_apis(server, model, stream):
    want = model.generate(RENDERED, max_tokens=N, temperature=0, logprobs=TOP).logprobs
    got, _ = chat(server, stream, logprobs=True, top_logprobs=TOP)
    assert len(got) == N
    assert_entries_match(model, got, want)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_greedy_tokens_logprob_is_the_top_one_and_the_top_is_sorted(server, stream):
    got, _ = chat(server, stream, logprobs=True, top_logprobs=5)
    for e in got:
        top = [t["logprob"] for t in e["top_logprobs"]]
        assert len(top) == 5 and top == sorted(top, reverse=True)
        assert (e["id"], e["logprob"]) == (e["top_logprobs"][0]["id"], top[0])


def test_chat_logprobs_through_the_openai_client(server, model):
    want = model.generate(RENDERED, max_tokens=N, temperature=0, logprobs=2).logprobs
    out = server.client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=N, temperature=0,
                                                   logprobs=True, top_logprobs=2)
    content = out.choices[0].logprobs.content
    assert [c.logprob for c in content] == pytest.approx([w.logprob for w in want], abs=1e-6)
    assert [[t.token for t in c.top_logprobs] for c in content] == [[piece(model, t) for t, _ in w.top] for w in want]
    chunks = list(server.client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=N, temperature=0,
                                                          logprobs=True, top_logprobs=2, stream=True))
    streamed = [c for chunk in chunks if chunk.choices and chunk.choices[0].logprobs
                for c in chunk.choices[0].logprobs.content]
    assert [c.model_dump() for c in streamed] == [c.model_dump() for c in content]


def test_chat_logprobs_without_top_logprobs_have_an_empty_top(server, model):
    want = model.generate(RENDERED, max_tokens=N, temperature=0, logprobs=0).logprobs
    got, _ = chat(server, False, logprobs=True)
    assert_entries_match(model, got, want)
    assert all(e["top_logprobs"] == [] for e in got)


# ------------------------------------------------------------------------------------------ completions

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_completion_logprobs_have_openais_legacy_shape_and_the_python_apis_values(server, model, stream):
    want = model.generate(PROMPT, max_tokens=N, temperature=0, logprobs=TOP).logprobs
    got, _ = completion(server, stream, logprobs=TOP)
    texts = [piece(model, w.token) for w in want]
    assert len(texts) == N
    assert got["tokens"] == texts
    assert got["token_logprobs"] == pytest.approx([w.logprob for w in want], abs=1e-6)
    assert got["text_offset"] == [sum(map(len, texts[:i])) for i in range(N)]
    for top, w, text in zip(got["top_logprobs"], want, texts):  # the N most probable and the generated token
        expected = {piece(model, t): lp for t, lp in w.top} | {text: w.logprob}
        assert top == pytest.approx(expected, abs=1e-6)
    assert_entries_match(model, got["content"], want)  # llama-server's shape alongside


def test_completion_logprobs_through_the_openai_client(server, model):
    want = model.generate(PROMPT, max_tokens=N, temperature=0, logprobs=1).logprobs
    out = server.client().completions.create(model="m", prompt=PROMPT, max_tokens=N, temperature=0, logprobs=1)
    logprobs = out.choices[0].logprobs
    assert logprobs.token_logprobs == pytest.approx([w.logprob for w in want], abs=1e-6)
    assert all(max(top.values()) == lp for top, lp in zip(logprobs.top_logprobs, logprobs.token_logprobs))  # greedy


# ------------------------------------------------------------------------------------------ speculation

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_logprobs_are_the_same_with_and_without_speculation(server, stream):
    spec, spec_timings = chat(server, stream, logprobs=True, top_logprobs=TOP)
    plain, plain_timings = chat(server, stream, logprobs=True, top_logprobs=TOP, **PLAIN)
    assert spec_timings["draft_n_accepted"] > 0 and plain_timings["draft_n"] == 0  # the test means something
    assert [e["id"] for e in spec] == [e["id"] for e in plain]
    for a, b in zip(spec, plain):
        assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-5)
        assert [t["id"] for t in a["top_logprobs"]] == [t["id"] for t in b["top_logprobs"]]
    spec, _ = completion(server, stream, logprobs=TOP)
    plain, _ = completion(server, stream, logprobs=TOP, **PLAIN)
    assert spec["tokens"] == plain["tokens"]
    assert spec["token_logprobs"] == pytest.approx(plain["token_logprobs"], abs=1e-5)


# ------------------------------------------------------------------------------------------ llama-server's n_probs

def test_n_probs_on_the_v1_endpoints_is_logprobs(server, model):
    want = model.generate(RENDERED, max_tokens=N, temperature=0, logprobs=2).logprobs
    got, _ = chat(server, False, n_probs=2)
    assert_entries_match(model, got, want)
    want = model.generate(PROMPT, max_tokens=N, temperature=0, logprobs=2).logprobs
    got, _ = completion(server, False, n_probs=2)
    assert_entries_match(model, got["content"], want)
    for endpoint, body in (("/v1/chat/completions", {"messages": MESSAGES}), ("/v1/completions", {"prompt": PROMPT})):
        status, out = post_json(server, endpoint, body | {"max_tokens": 2, "n_probs": 0})
        assert status == 200 and out["choices"][0]["logprobs"] is None  # 0: llama-server's off


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_native_completion_probabilities_are_the_python_apis(server, model, stream):
    want = model.generate(PROMPT, max_tokens=N, temperature=0, logprobs=2).logprobs
    body = {"prompt": PROMPT, "n_predict": N, "temperature": 0, "n_probs": 2, "stream": stream}
    if stream:
        *chunks, last = sse(server, "/completion", body)
        assert "completion_probabilities" not in last  # as llama-server: the chunks had them
        assert all(len(c["completion_probabilities"]) == len(c["tokens"]) for c in chunks)
        got = [e for c in chunks for e in c["completion_probabilities"]]
        assert len(got) > N // 2
        want = want[:len(got)]  # tokens after the last text piece are in no chunk (as in llama-server)
    else:
        status, out = post_json(server, "/completion", body)
        assert status == 200 and out["generation_settings"]["n_probs"] == 2
        got = out["completion_probabilities"]
    assert_entries_match(model, got, want)


# ------------------------------------------------------------------------------------------ refused

@pytest.mark.parametrize("endpoint, fields, message", [
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs: needs `logprobs: true`"),
    ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 0}, "top_logprobs: needs `logprobs: true`"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs: "),
    ("/v1/chat/completions", {"logprobs": 2}, "logprobs: "),
    ("/v1/completions", {"top_logprobs": 2}, "top_logprobs: a chat field"),
    ("/v1/completions", {"logprobs": 101}, "logprobs: "),
    ("/v1/completions", {"logprobs": -1}, "logprobs: "),
    ("/v1/completions", {"n_probs": 101}, "n_probs: "),
])
def test_bad_logprobs_fields_are_a_400_naming_the_field(server, endpoint, fields, message):
    body = {"prompt": PROMPT} if endpoint == "/v1/completions" else {"messages": MESSAGES}
    status, out = post_json(server, endpoint, body | {"max_tokens": 2} | fields)
    assert status == 400 and out["error"]["message"].startswith(message), out


def test_no_logprobs_unless_asked(server):
    for endpoint, body in (("/v1/chat/completions", {"messages": MESSAGES}), ("/v1/completions", {"prompt": PROMPT})):
        status, out = post_json(server, endpoint, body | {"max_tokens": 2, "logprobs": None})
        assert status == 200 and out["choices"][0]["logprobs"] is None
        chunks = sse(server, endpoint, body | {"max_tokens": 2, "stream": True})
        assert all(c["choices"][0]["logprobs"] is None for c in chunks if c["choices"])


@pytest.mark.parametrize("endpoint", ["/completion", "/completion stream", "/v1/completions", "/v1/chat/completions"])
def test_post_sampling_probs_are_the_samplers_as_llama_server_shows_them(server, model, endpoint):
    """post_sampling_probs (llama-server's): each token's `prob` and `top_probs` are the distribution the sampler
    drew it from, the Python API's post_sampling_probs entries; at most the tokens that survive top_k, summing to 1
    when fewer than asked (their test_n_probs_post_sampling); whole and streamed; the legacy completions fields keep
    their natural logs."""
    sampler = {"temperature": 1.0, "top_k": 3, "top_p": 1.0, "min_p": 0.0, "seed": 11}
    want = model.generate(PROMPT, max_tokens=N, logprobs=10, post_sampling_probs=True, **sampler).logprobs
    status = 200
    if endpoint == "/completion":
        status, out = post_json(server, endpoint, {"prompt": PROMPT, "n_predict": N, "n_probs": 10,
                                                   "post_sampling_probs": True} | sampler)
        got = out["completion_probabilities"]
    elif endpoint == "/completion stream":
        chunks = sse(server, "/completion", {"prompt": PROMPT, "n_predict": N, "n_probs": 10, "stream": True,
                                             "post_sampling_probs": True} | sampler)
        got = [e for c in chunks for e in c.get("completion_probabilities", [])]
        want = want[:len(got)]  # tokens after the last text piece are in no chunk (as in llama-server)
    elif endpoint == "/v1/completions":
        status, out = post_json(server, endpoint, {"prompt": PROMPT, "max_tokens": N, "logprobs": 10,
                                                   "post_sampling_probs": True} | sampler)
        legacy = out["choices"][0]["logprobs"]
        got = legacy["content"]
        assert legacy["token_logprobs"] == pytest.approx([w.logprob for w in want], abs=1e-6)
    else:
        status, out = post_json(server, endpoint, {"messages": MESSAGES, "max_tokens": N, "logprobs": True,
                                                   "top_logprobs": 10, "post_sampling_probs": True} | sampler)
        got, want = out["choices"][0]["logprobs"]["content"], None
    assert status == 200 and len(got) > 0
    for i, entry in enumerate(got):
        assert 0 < entry["prob"] <= 1 and "logprob" not in entry
        top = entry["top_probs"]
        assert 0 < len(top) <= 3 and all(0 < t["prob"] <= 1 and "logprob" not in t for t in top)
        assert entry["id"] in [t["id"] for t in top]  # drawn from what survived the filters
        assert sum(t["prob"] for t in top) == pytest.approx(1.0, abs=1e-5)
        if want is not None:
            assert entry["id"] == want[i].token and entry["prob"] == pytest.approx(np.exp(want[i].logprob))
            assert [t["id"] for t in top] == [t for t, _ in want[i].top]
