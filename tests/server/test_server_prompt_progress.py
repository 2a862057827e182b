"""Prompt progress events (llama-server's return_progress; issue 30): a stream that asks for them gets a
prompt_progress {total, cache, processed, time_ms} when its prompt starts (processed = cache) and after every step
that evaluated some of it, processed growing to total, all before its first token; on the native, OpenAI chat and
completions and Responses streams, each in its own shape. The server runs -b 32 so that a prompt of a few hundred
tokens takes several ubatches."""
from __future__ import annotations

import http.client
import json

import pytest

from live_server import TIMEOUT, Server, post_json

PROMPT = "This is a test of prompt progress. " * 12  # each test puts a word of its own first: no cache hit
N_BATCH = 32


@pytest.fixture(scope="module")
def server(predictable_gguf, tmp_path_factory):
    s = Server(predictable_gguf, tmp_path_factory.mktemp("progress") / "server.log", "-b", str(N_BATCH))
    yield s
    s.stop()


def events(server: Server, path: str, body: dict) -> list[dict]:
    """The data of every server-sent event of a streamed request, [DONE] left out."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    try:
        conn.request("POST", path, json.dumps(body | {"stream": True}), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200, response.read()
        raw = response.read().decode()
    finally:
        conn.close()
    lines = [line[len("data: "):] for line in raw.splitlines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def check_progress(chunks: list[dict], first_text: int, least: int = 3) -> list[dict]:
    """The claims every API's progress makes, at least `least` events; returns the progress objects."""
    at = [i for i, c in enumerate(chunks) if "prompt_progress" in c]
    progress = [chunks[i]["prompt_progress"] for i in at]
    assert len(progress) >= least, progress  # fresh: the start, then one per step at least twice (-b 32)
    first, last = progress[0], progress[-1]
    assert first["processed"] == first["cache"] and first["time_ms"] == 0 and first["total"] > 5 * N_BATCH / 2
    assert all(p["total"] == first["total"] and p["cache"] == first["cache"] for p in progress)
    assert all(a["processed"] < b["processed"] and a["time_ms"] <= b["time_ms"] for a, b in zip(progress, progress[1:]))
    assert last["processed"] == last["total"]
    assert max(at) < first_text  # all before the first token's chunk
    return progress


def test_chat_stream_reports_prompt_progress_before_the_first_token(server):
    chunks = events(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Chat. " + PROMPT}],
                                                     "max_tokens": 4, "temperature": 0, "return_progress": True})
    first_text = next(i for i, c in enumerate(chunks)
                      if c["choices"] and any(c["choices"][0]["delta"].get(k) for k in ("content", "reasoning_content")))
    check_progress(chunks, first_text)
    progress_chunk = next(c for c in chunks if "prompt_progress" in c)
    assert progress_chunk["choices"][0]["delta"] == {"role": "assistant", "content": None}  # llama-server's shape


def test_a_resumed_prompt_reports_its_cached_tokens(server):
    body = {"prompt": "Resumed. " + PROMPT, "max_tokens": 4, "temperature": 0, "return_progress": True}
    events(server, "/v1/completions", body)
    chunks = events(server, "/v1/completions", body | {"prompt": body["prompt"] + " And more words to evaluate."})
    first_text = next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["text"])
    progress = check_progress(chunks, first_text, least=2)  # the start and one step: what is new fits a ubatch
    assert progress[0]["cache"] > 5 * N_BATCH / 2
    assert chunks[0]["choices"][0] == {"index": 0, "text": "", "logprobs": None, "finish_reason": None}


def test_native_progress_carries_the_prompts_timings_so_far(server):
    chunks = events(server, "/completion", {"prompt": "Native. " + PROMPT, "n_predict": 4, "temperature": 0,
                                           "return_progress": True, "timings_per_token": True})
    first_text = next(i for i, c in enumerate(chunks) if c.get("tokens"))
    check_progress(chunks, first_text)
    timings = [c["timings"] for c in chunks if "prompt_progress" in c]
    assert timings[0]["prompt_n"] == 0 and timings[0]["prompt_ms"] == 0  # llama-server: before any prompt token
    assert all(a["prompt_ms"] <= b["prompt_ms"] for a, b in zip(timings, timings[1:])) and timings[-1]["prompt_ms"] > 0
    assert all(v >= 0 for t in timings for v in t.values())


def test_responses_progress_is_an_in_progress_event(server):
    chunks = events(server, "/v1/responses", {"input": "Responses. " + PROMPT, "max_output_tokens": 4, "temperature": 0,
                                             "return_progress": True})
    first_text = next(i for i, c in enumerate(chunks) if c["type"].endswith(".delta"))
    check_progress(chunks, first_text)
    assert {c["type"] for c in chunks if "prompt_progress" in c} == {"response.in_progress"}


@pytest.mark.parametrize("body", [{"stream": False, "return_progress": True}, {"return_progress": False}, {}])
def test_no_progress_unless_a_stream_asks(server, body):
    request = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2, "temperature": 0} | body
    if request.get("stream") is False:
        status, out = post_json(server, "/v1/chat/completions", request)
        assert status == 200 and "prompt_progress" not in out
    else:
        assert not any("prompt_progress" in c for c in events(server, "/v1/chat/completions", request))


def test_per_token_timings_carry_the_prompts_side(server):
    """timings_per_token (llama-server's telemetry): every text delta of a Responses stream and every native chunk
    carries the timings so far, the prompt's side as the final timings say it and the generation's growing; the
    Responses stream's last event has the final timings."""
    chunks = events(server, "/v1/responses", {"input": "Timed. " + PROMPT, "max_output_tokens": 6, "temperature": 0,
                                             "timings_per_token": True})
    final = chunks[-1]["timings"]
    deltas = [c["timings"] for c in chunks if c["type"].endswith(".delta")]
    assert deltas and all("timings" in c for c in chunks if c["type"].endswith(".delta"))
    assert all(t["prompt_n"] == final["prompt_n"] > 0 and t["prompt_ms"] == final["prompt_ms"] for t in deltas)
    assert [t["predicted_n"] for t in deltas] == sorted(t["predicted_n"] for t in deltas) and final["predicted_n"] == 6
    native = events(server, "/completion", {"prompt": "Timed natively. " + PROMPT, "n_predict": 6, "temperature": 0,
                                            "timings_per_token": True})
    pieces = [c["timings"] for c in native if not c["stop"]]
    assert pieces and all(t["prompt_n"] == native[-1]["timings"]["prompt_n"] > 0 for t in pieces)
