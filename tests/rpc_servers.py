"""glm5next-rpc-server processes on loopback for the tests: real ggml devices in other processes.

ggml's device registry lives as long as the test process and cannot forget a device, and ggml's RPC client aborts
the process when it talks to a server that is gone: so servers live for the whole session (RpcServers.stop at its
end), each under a name, and a test that starts subprocess clients uses a server of its own (a server serves one
client connection at a time)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RpcServers:
    """get(name) -> (endpoint "127.0.0.1:PORT", its Popen), started on first use, one thread each."""

    def __init__(self):
        self._servers: dict[str, tuple[str, subprocess.Popen]] = {}

    def get(self, name: str) -> tuple[str, subprocess.Popen]:
        if name not in self._servers:
            port = free_port()
            proc = subprocess.Popen([str(BIN / "glm5next-rpc-server"), "--port", str(port), "-t", "1"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self._servers[name] = (f"127.0.0.1:{port}", proc)
            self._wait_listening(port, proc)
        return self._servers[name]

    @staticmethod
    def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"glm5next-rpc-server exited: {proc.stderr.read()}")
            try:
                # A bare connect is a client that leaves at once: the server goes back to accepting.
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"glm5next-rpc-server did not listen on {port}")

    def stop(self) -> None:
        for _, proc in self._servers.values():
            proc.kill()
            proc.wait()
