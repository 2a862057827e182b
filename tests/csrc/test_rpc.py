"""ggml RPC devices (llama.cpp's rpc-server and --rpc): glm5next-rpc-server serves this machine's CPU on loopback,
--rpc / Model(rpc=...) adds its device to ggml's registry, a bad endpoint is an error naming it instead of
ggml's abort, and a device lost mid-generation ends the process with a message naming it, never a hang.
(Placement on these devices: test_devices.py.)"""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rpc_servers import free_port

from glm5next_runtime import _core

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def rpc_server(rpc_servers):
    """A server of this module's own: its subprocess clients must not wait behind this process's connection."""
    return rpc_servers.get("test_rpc")


def test_rpc_server_warns_that_the_protocol_has_no_authentication(rpc_server):
    endpoint, proc = rpc_server
    line = proc.log.read_text().splitlines()[0]
    assert "no authentication" in line and endpoint in line


def test_rpc_server_binds_loopback_by_default(rpc_server):
    endpoint, _ = rpc_server
    port = int(endpoint.rsplit(":", 1)[1])
    # /proc/net/tcp: "sl local_address rem_address st ...", addresses as little-endian hex IP:port, LISTEN = 0A
    listening = [line.split()[1] for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
                 if line.split()[3] == "0A" and int(line.split()[1].split(":")[1], 16) == port]
    assert listening == ["0100007F:%04X" % port]  # 127.0.0.1 only, not 0.0.0.0


def test_added_rpc_server_is_a_device(rpc_server):
    endpoint, _ = rpc_server
    _core.add_rpc_servers([endpoint])
    devices = _core.list_devices()
    rpc = [d for d in devices if d["description"] == endpoint]
    assert len(rpc) == 1 and rpc[0]["name"].startswith("RPC"), devices
    _core.add_rpc_servers([endpoint])  # a second time: skipped, not a second device
    assert [d["name"] for d in _core.list_devices()] == [d["name"] for d in devices]


@pytest.mark.parametrize("endpoint,why", [("localhost", "HOST:PORT"), ("127.0.0.1:http", "port"),
                                          ("127.0.0.1:0", "port"), ("no-such-host.invalid:50052", "resolve")])
def test_malformed_endpoint_is_named(endpoint, why):
    with pytest.raises(ValueError, match=why) as e:
        _core.add_rpc_servers([endpoint])
    assert endpoint in str(e.value)


def test_unreachable_endpoint_is_named_not_aborted():
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ValueError, match="cannot connect") as e:
        _core.add_rpc_servers([endpoint])
    assert endpoint in str(e.value)


def test_a_server_that_is_not_ggml_rpc_is_named():
    """Something listens but never answers the RPC hello (here: accepts and stays silent)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    endpoint = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="no ggml RPC hello") as e:
            _core.add_rpc_servers([endpoint], timeout_ms=500)
        assert endpoint in str(e.value)
        assert time.monotonic() - t0 < 5
    finally:
        listener.close()


def test_model_with_a_bad_rpc_endpoint_raises_naming_it(checkpoints):
    from glm5next_runtime import Model
    path = checkpoints.convert(checkpoints.make("rpc-tiny", "tiny", dtype="f32"), outtype="f32")
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(ValueError, match=endpoint):
        Model(path, n_ctx=64, rpc=[endpoint])


def test_cli_bad_rpc_exits_1_naming_it(checkpoints):
    path = checkpoints.convert(checkpoints.make("rpc-tiny", "tiny", dtype="f32"), outtype="f32")
    endpoint = f"127.0.0.1:{free_port()}"
    out = subprocess.run([str(BIN / "glm5next-cli"), "-m", str(path), "-p", "x", "-n", "1", "--rpc", endpoint],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert endpoint in out.stderr


@pytest.mark.parametrize("program", ["glm5next-cli", "glm5next-server"])
@pytest.mark.parametrize("rpc_first", [True, False])
def test_list_devices_includes_the_rpc_server(rpc_server, program, rpc_first):
    """Wherever --rpc stands, as llama.cpp: --list-devices needs no -m."""
    endpoint, _ = rpc_server
    flags = ["--rpc", endpoint, "--list-devices"] if rpc_first else ["--list-devices", "--rpc", endpoint]
    out = subprocess.run([str(BIN / program), *flags], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "CPU" in out.stdout and endpoint in out.stdout


def test_list_devices_with_a_bad_rpc_endpoint_exits_1_naming_it():
    endpoint = f"127.0.0.1:{free_port()}"
    out = subprocess.run([str(BIN / "glm5next-cli"), "--list-devices", "--rpc", endpoint], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and endpoint in out.stderr and "error:" in out.stderr


def test_device_lost_mid_generation_ends_the_process_naming_it(checkpoints, tmp_path):
    """ggml's RPC client aborts when its server goes away; the process then ends with status 1 and names the
    endpoint (say which of request failure or process end: process end, since ggml aborts inside its client)."""
    from rpc_servers import start_rpc_server, wait_listening
    path = checkpoints.convert(checkpoints.make("rpc-tiny", "tiny", dtype="f32"), outtype="f32")
    port = free_port()
    server = start_rpc_server(port)
    wait_listening(port, server)
    endpoint = f"127.0.0.1:{port}"
    script = tmp_path / "lose.py"
    script.write_text(f"""
import os, signal, sys
from glm5next_runtime import Model
m = Model({str(path)!r}, n_ctx=256, n_threads=1, n_gpu_layers=99, rpc=[{endpoint!r}], spec_type="none")
stream = m.generate("def f(x):", max_tokens=200, temperature=0, stream=True)
for i, piece in enumerate(stream):
    if i == 5:
        os.kill({server.pid}, signal.SIGKILL)
print("generation finished", file=sys.stderr)
""")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"RPC servers in use: {endpoint};" in out.stderr
    assert "generation finished" not in out.stderr
    assert time.monotonic() - t0 < 60
