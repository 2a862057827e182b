"""glm5next-rpc-server processes on loopback for the tests: real ggml devices in other processes.

ggml's device registry lives as long as the test process and cannot forget a device, and ggml's RPC client ends
the process when it talks to a server that is gone (models on RPC devices free their buffers there even at
interpreter exit): so servers outlive the test process. Each is started with the kernel's parent-death signal
(SIGKILL when the test process ends), under a name; a test that starts subprocess clients uses a server of its
own (a server serves one client connection at a time)."""
from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent ends (Linux prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def start_rpc_server(port: int) -> subprocess.Popen:
    """glm5next-rpc-server on 127.0.0.1:port with one thread, ended by the kernel when this process ends. Its
    stderr goes to a file (`proc.log`): a pipe nobody reads would fill and stall the server."""
    log = Path(tempfile.mkstemp(prefix=f"rpc-{port}-", suffix=".log")[1])
    with log.open("w") as err:
        proc = subprocess.Popen([str(BIN / "glm5next-rpc-server"), "--port", str(port), "-t", "1"],
                                stdout=subprocess.DEVNULL, stderr=err, preexec_fn=die_with_parent)
    proc.log = log
    return proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"glm5next-rpc-server exited: {proc.log.read_text()}")
        try:
            # A bare connect is a client that leaves at once: the server goes back to accepting.
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"glm5next-rpc-server did not listen on {port}")


class RpcServers:
    """get(name) -> (endpoint "127.0.0.1:PORT", its Popen), started on first use, one thread each."""

    def __init__(self):
        self._servers: dict[str, tuple[str, subprocess.Popen]] = {}

    def get(self, name: str) -> tuple[str, subprocess.Popen]:
        if name not in self._servers:
            port = free_port()
            proc = start_rpc_server(port)
            self._servers[name] = (f"127.0.0.1:{port}", proc)
            wait_listening(port, proc)
        return self._servers[name]

