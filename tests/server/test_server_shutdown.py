"""glm5next-server when it stops and when clients hang up (issue 14): on SIGTERM the requests queued for a slot get
an OpenAI-shaped 503 at once (they used to get a plain-text 500 and leave tracebacks), running generations get the
grace period then end with a 503 (or, in a stream, a 503 error event), and the process exits with a clean log. A
client that hangs up in the middle of its upload costs one log line, no traceback."""
from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time

import psutil

from glm5next_runtime.server.stopping import GRACE_S
from live_server import TIMEOUT, Server, get, post_json

N_CTX = 32768  # long enough that a greedy generation outlives the grace period


def wait_for(check, limit: float = TIMEOUT) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def deferred(server: Server) -> int:
    text = get(server, "/metrics")[1].decode()
    return int(float(next(line.split()[1] for line in text.splitlines()
                          if line.startswith("llamacpp:requests_deferred "))))


def stream_events(server: Server, out: list) -> None:
    """A greedy stream of up to N_CTX tokens; every event's JSON goes to `out`."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=4 * TIMEOUT)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "Hello world", "max_tokens": N_CTX, "temperature": 0,
                                                        "stream": True}), {"Content-Type": "application/json"})
    response = conn.getresponse()
    for line in response:
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
            out.append(json.loads(line[len(b"data: "):]))


def test_stopping_answers_queued_requests_503_and_cuts_running_ones_after_the_grace(predictable_gguf, tmp_path):
    server = Server(predictable_gguf, tmp_path / "server.log", "-np", "2", "--metrics", n_ctx=2 * N_CTX)  # N_CTX each
    try:
        results: dict[str, tuple[int, dict, float]] = {}

        def ask(name: str) -> None:
            status, out = post_json(server, "/v1/completions",
                                    {"prompt": "The quick brown fox", "max_tokens": N_CTX, "temperature": 0})
            results[name] = (status, out, time.monotonic())

        events: list[dict] = []
        running = [threading.Thread(target=ask, args=("running",)),
                   threading.Thread(target=stream_events, args=(server, events))]
        for t in running:
            t.start()
        wait_for(lambda: json.loads(get(server, "/health")[1])["slots_idle"] == 0 and events)
        queued = [threading.Thread(target=ask, args=(f"queued{i}",)) for i in range(2)]
        for t in queued:
            t.start()
        wait_for(lambda: deferred(server) == 2)

        workers = psutil.Process(server.proc.pid).children(recursive=True)  # the chat template's, among others
        assert workers
        stopped_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for t in queued:
            t.join(TIMEOUT)
        for name in ("queued0", "queued1"):
            status, out, at = results[name]
            assert status == 503 and out["error"]["type"] == "unavailable_error" and out["error"]["code"] == 503
            assert "shutting down" in out["error"]["message"] and at - stopped_at < 2.0

        for t in running:
            t.join(GRACE_S + TIMEOUT)
        status, out, at = results["running"]
        assert status == 503 and "the generation was stopped" in out["error"]["message"]
        assert GRACE_S - 0.5 < at - stopped_at < GRACE_S + 3.0
        assert events[-1]["error"]["code"] == 503 and "choices" in events[0]

        assert server.proc.wait(TIMEOUT) == -signal.SIGTERM  # uvicorn re-raises the signal once it is done
        psutil.wait_procs(workers, timeout=5)
        assert not [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        log = server.log.read_text()
        assert "Traceback" not in log and " 500 " not in log and "Cancel" not in log
        assert "stopping: 2 queued request(s) answered 503" in log
    finally:
        server.stop()


def test_a_client_hanging_up_mid_upload_costs_one_log_line(predictable_gguf, tmp_path):
    server = Server(predictable_gguf, tmp_path / "server.log")
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100000\r\n\r\n" + b'{"prompt": "' + b"x" * 1000)
        wait_for(lambda: server.log.read_text().count("went away during its upload") == 3)
        assert get(server, "/health")[0] == 200
        log = server.log.read_text()
        assert "Traceback" not in log and "Exception" not in log and " 500 " not in log
        assert len([line for line in log.splitlines() if "upload" in line]) == 3
    finally:
        server.stop()
