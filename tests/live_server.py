"""glm5next-server in a subprocess on a free loopback port, for the tests that talk to a real server: start (wait
for /health, fail with the server's log), stop (killed if need be), and raw HTTP helpers with a timeout."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from rpc_servers import die_with_parent

TIMEOUT = 30.0  # seconds, for every request
N_CTX = 4096  # the servers' default context: room for long streams, and the tiny models stay fast
SERVER = Path(sys.executable).parent / "glm5next-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """glm5next-server in a subprocess; its output goes to a file (a pipe nobody reads could block it)."""

    def __init__(self, gguf: Path, log: Path, *flags: str, n_ctx: int = N_CTX, port: int | None = None,
                 env: dict[str, str] | None = None):
        """port: where it listens (a free one when None); env: variables added to the server's environment."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([str(SERVER), "-m", str(gguf), "--port", str(self.port), "-t", "1",
                                          "-c", str(n_ctx), *flags], stdout=out, stderr=subprocess.STDOUT,
                                         env=None if env is None else os.environ | env,
                                         preexec_fn=die_with_parent)  # no orphan when pytest itself is killed
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if get(self, "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"the server did not answer /health within {limit} s:\n{self.log.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, timeout=TIMEOUT, max_retries=0)


def request(server: Server, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(server.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get(server: Server, path: str, **kw) -> tuple[int, bytes]:
    return request(server, "GET", path, **kw)


def post_json(server: Server, path: str, body: object, **kw) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, out = request(server, "POST", path, raw, headers={"Content-Type": "application/json",
                                                              **kw.pop("headers", {})}, **kw)
    return status, json.loads(out)
