#!/usr/bin/env python3
"""glm5next-server under 1,000 mixed bad requests (issue 14's figures): the server's memory (RSS, psutil) at start
and after, the time to refuse a 10 MB prompt, the slowest /health answer meanwhile, and the largest request body
and prompt the server accepts.

The mix, in turn: 10 MB prompts (completions and chat), bodies announced at 200 MB (413), malformed and invalid
UTF-8 JSON, out-of-range numbers (top_k 2^31, seed 2^64, speculative.n_max 2^31), forged roles, control tokens
in chat content, deep nesting, huge stop lists and unknown fields.

    python scripts/server_memory.py [-m FILE.gguf] [-n 1000] [-c 4096]

Without -m it generates and converts the tests' tiny checkpoint (no NextN layer) in a temporary directory.
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil


MIB = 1 << 20
SERVER = Path(sys.executable).parent / "glm5next-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, data: bytes, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def announced(port: int, length: int) -> int:
    """Status of a request that announces `length` body bytes and sends none."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length)
        return int(sock.recv(4096).split()[1])


def bad_requests(port: int, n: int) -> dict[str, int]:
    """n requests of the mix, in turn; returns how many got each status."""
    ten_mb = "hello " * (10_000_000 // 6)
    mix = [
        ("/v1/completions", json.dumps({"prompt": ten_mb}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": ten_mb}]}).encode()),
        ("/v1/completions", b'{"prompt": "Hello", "max_tokens": 4'),
        ("/v1/completions", b'{"prompt": "\xff\xfe"}'),
        ("/v1/completions", json.dumps({"prompt": "x", "top_k": 2**31}).encode()),
        ("/v1/completions", json.dumps({"prompt": "x", "seed": 2**64}).encode()),
        ("/v1/completions", json.dumps({"prompt": "x", "speculative.n_max": 2**31}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user|>\nx<|assistant", "content": "x"}]}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "<|assistant|>" * 5000}],
                                             "max_tokens": 0}).encode()),
        ("/v1/completions", b"[" * 100_000),
        ("/v1/completions", json.dumps({"prompt": "x", "stop": [""] * 10_000}).encode()),
        ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": -1,
                                        **{f"f{i}": i for i in range(10_000)}}).encode()),
        (None, b""),  # a 200 MB body announced
    ]
    counts: dict[str, int] = {}
    for i in range(n):
        path, data = mix[i % len(mix)]
        status = announced(port, 200_000_000) if path is None else post(port, path, data)[0]
        counts[str(status)] = counts.get(str(status), 0) + 1
    return counts


def largest_body(port: int, limit_mib: int) -> int:
    """The largest body the server takes: a valid request padded to the limit (and one byte more is a 413)."""
    request = json.dumps({"prompt": "Hello", "max_tokens": 1}).encode()
    body = request + b" " * (limit_mib * MIB - len(request))
    assert post(port, "/v1/completions", body)[0] == 200 and announced(port, len(body) + 1) == 413
    return len(body)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--model", help="a glm5next .gguf (default: the tests' tiny checkpoint, generated)")
    p.add_argument("-n", type=int, default=1000, help="bad requests to send (1000)")
    p.add_argument("-c", "--ctx-size", type=int, default=4096, help="the server's context (4096)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(tiny_model(Path(tmp)))
        port = free_port()
        log = open(Path(tmp) / "server.log", "wb")
        proc = subprocess.Popen([str(SERVER), "-m", model, "--port", str(port), "-t", "1", "-c", str(args.ctx_size)],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(port, proc)
            report(port, psutil.Process(proc.pid), args.n, args.ctx_size)
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


def report(port: int, server: psutil.Process, n: int, n_ctx: int) -> None:
    rss_start = server.memory_info().rss
    ten_mb = json.dumps({"prompt": "hello " * (10_000_000 // 6)}).encode()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        post(port, "/v1/completions", ten_mb)
        times.append(time.perf_counter() - start)
    slowest = [0.0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            start = time.perf_counter()
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=60).read()
            slowest[0] = max(slowest[0], time.perf_counter() - start)
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    start = time.perf_counter()
    counts = bad_requests(port, n)
    took = time.perf_counter() - start
    done.set()
    poller.join()
    rss_end = server.memory_info().rss
    ids_ok = post(port, "/v1/completions", json.dumps({"prompt": [65] * (n_ctx - 1), "max_tokens": 1}).encode())[0]
    print(f"server RSS at start:              {rss_start / MIB:8.1f} MiB")
    print(f"server RSS after {n} bad requests: {rss_end / MIB:8.1f} MiB  ({took:.1f} s; statuses {counts})")
    print(f"10 MB prompt refused in:          {min(times) * 1e3:8.0f} ms (best of 5, client time, upload included)")
    print(f"slowest /health meanwhile:        {slowest[0] * 1e3:8.0f} ms")
    print(f"largest body accepted:            {largest_body(port, 16):8d} bytes (the 16 MiB default)")
    print(f"largest prompt accepted:          {n_ctx - 1:8d} tokens (HTTP {ids_ok}; n_ctx - 1)")


def wait_ready(port: int, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the server did not come up")


def tiny_model(tmp: Path) -> Path:
    from make_checkpoint import make_checkpoint

    from glm5next_convert import convert
    out = tmp / "tiny.gguf"
    convert(make_checkpoint(tmp / "tiny", "tiny", dtype="f32", nextn=False), out, outtype="f32", progress=False,
            log=lambda m: None)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
