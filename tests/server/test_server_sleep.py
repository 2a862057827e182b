"""--sleep-idle-seconds (llama-server's sleep, issue 16): after N idle seconds the server frees the model (its
weights' mapping leaves the process) and /props says is_sleeping; /health, /props, /models and /metrics answer
without waking it; the next request that needs the model loads it again and answers as before the sleep.

One server on the tiny file with -np 2 (the second slot shares the first's weights, so both must let go) and a
1-second idle time."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from live_server import SERVER, Server, get, post_json

IDLE_S = 1
PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def server(plain_gguf, tmp_path_factory):
    server = Server(plain_gguf, tmp_path_factory.mktemp("sleep") / "server.log", "--sleep-idle-seconds",
                    str(IDLE_S), "--metrics", "-np", "2")
    yield server
    server.stop()


def mapped(server: Server, gguf: Path) -> bool:
    """Whether the server process maps the model file (its weights are loaded)."""
    return str(gguf) in Path(f"/proc/{server.proc.pid}/maps").read_text()


def get_json(server: Server, path: str, **kw) -> tuple[int, dict]:
    status, raw = get(server, path, **kw)
    return status, json.loads(raw)


def is_sleeping(server: Server, key: str | None = None) -> bool:
    status, out = get_json(server, "/props", headers={"Authorization": f"Bearer {key}"} if key else {})
    assert status == 200
    return out["is_sleeping"]


def wait_for_sleep(server: Server, limit: float = 10.0, key: str | None = None) -> None:
    deadline = time.monotonic() + limit
    while not is_sleeping(server, key):
        assert time.monotonic() < deadline, "the server did not fall asleep"
        time.sleep(0.1)


def complete(server: Server) -> str:
    status, out = post_json(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0})
    assert status == 200, out
    return out["content"]


def test_an_idle_server_frees_the_model_and_answers_the_same_after_waking(server, plain_gguf):
    before = complete(server)
    assert mapped(server, plain_gguf) and not is_sleeping(server)
    wait_for_sleep(server)
    assert not mapped(server, plain_gguf)
    assert complete(server) == before  # woken by the request, transparently
    assert mapped(server, plain_gguf) and not is_sleeping(server)


def test_read_only_endpoints_answer_without_waking(server, plain_gguf):
    complete(server)
    wait_for_sleep(server)
    for path in ("/health", "/v1/health", "/props", "/models", "/v1/models", "/metrics"):
        assert get(server, path)[0] == 200, path
    _, models = get_json(server, "/v1/models")
    assert models["data"][0]["meta"]["n_vocab"] > 0
    time.sleep(IDLE_S)
    assert is_sleeping(server) and not mapped(server, plain_gguf)


@pytest.mark.parametrize("path, body", [
    ("/tokenize", {"content": "Hello"}),
    ("/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "Hello"}]}),
    ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "Hello"}]}),
])
def test_a_request_that_needs_the_model_wakes_the_server(server, plain_gguf, path, body):
    wait_for_sleep(server)
    status, out = post_json(server, path, body)
    assert status == 200, out
    assert not is_sleeping(server) and mapped(server, plain_gguf)


def test_a_request_turned_away_by_the_key_does_not_wake_it(plain_gguf, tmp_path):
    server = Server(plain_gguf, tmp_path / "server.log", "--sleep-idle-seconds", str(IDLE_S), "--api-key", "k")
    try:
        wait_for_sleep(server, key="k")
        assert post_json(server, "/tokenize", {"content": "Hello"})[0] == 401
        assert is_sleeping(server, key="k") and not mapped(server, plain_gguf)
        status, _ = post_json(server, "/tokenize", {"content": "Hello"}, headers={"Authorization": "Bearer k"})
        assert status == 200 and not is_sleeping(server, key="k")
    finally:
        server.stop()


def test_the_flag_takes_llama_servers_values(plain_gguf):
    for value in ("0", "-2"):
        run = subprocess.run([str(SERVER), "-m", str(plain_gguf), "--sleep-idle-seconds", value],
                             capture_output=True, text=True)
        assert run.returncode == 2 and f"--sleep-idle-seconds {value}: cannot be 0" in run.stderr
