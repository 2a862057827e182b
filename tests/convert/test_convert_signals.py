"""A conversion ended by a signal mid-write leaves nothing behind and the earlier output intact (issue 14): with
O_TMPFILE (Linux) for SIGKILL, SIGTERM, SIGHUP and SIGINT; with the named-temp fallback for the signals a process
can handle (SIGTERM, SIGHUP, SIGINT).

Each case runs the real command line in a subprocess, waits until it holds its output open with data in it
(polling /proc/<pid>/fd), freezes it there with SIGSTOP (so the signal lands mid-write, not by luck of timing),
then sends the signal."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from convert_checks import OLD_OUTPUT, fresh_copy

# The command line, optionally without O_TMPFILE (as on an OS or filesystem that lacks it), with the signals under
# test at their usual dispositions whatever the test runner passed down (an ignored SIGHUP, say).
DRIVER = ("import signal, sys\n"
          "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
          "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
          "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
          "from glm5next_convert import output\n"
          "if sys.argv[1] == 'fallback':\n"
          "    output.O_TMPFILE = None\n"
          "from glm5next_convert.cli import main\n"
          "raise SystemExit(main(sys.argv[2:]))\n")


def _writing_output(pid: int, out_dir) -> bool:
    """Whether process `pid` holds a file of out_dir open that already has data (the output, mid-write)."""
    prefix = f"{out_dir}/"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        link = f"/proc/{pid}/fd/{fd}"
        try:
            if os.readlink(link).startswith(prefix) and os.stat(link).st_size > 0:
                return True
        except OSError:
            continue
    return False


def _stopped_mid_write(ckpt, out, mode: str) -> subprocess.Popen:
    """The converter in a subprocess, stopped (SIGSTOP) while it writes its output, the earlier output still in
    place. Retries when the conversion finishes before it could be caught."""
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-c", DRIVER, mode, str(ckpt), "--outfile", str(out),
                              "--outtype", "q4_0", "--no-progress"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            if _writing_output(p.pid, out.parent):
                os.kill(p.pid, signal.SIGSTOP)
                if _writing_output(p.pid, out.parent) and out.read_bytes() == OLD_OUTPUT:
                    return p
                os.kill(p.pid, signal.SIGCONT)
                break
            time.sleep(0.0005)
        p.kill()
        p.communicate()
        out.write_bytes(OLD_OUTPUT)
        for f in out.parent.iterdir():
            if f != out:
                f.unlink()
    pytest.fail("could not catch the conversion mid-write in 3 tries")


@pytest.fixture
def job(checkpoints, tmp_path):
    return fresh_copy(checkpoints.make("bad-base", dtype="f32"), tmp_path)


@pytest.mark.parametrize("mode, sig", [
    ("o_tmpfile", signal.SIGKILL), ("o_tmpfile", signal.SIGTERM), ("o_tmpfile", signal.SIGHUP),
    ("o_tmpfile", signal.SIGINT),
    ("fallback", signal.SIGTERM), ("fallback", signal.SIGHUP), ("fallback", signal.SIGINT),
], ids=lambda x: x.name if isinstance(x, signal.Signals) else x)
def test_signal_mid_write_leaves_nothing_behind(job, mode, sig):
    ckpt, out = job
    p = _stopped_mid_write(ckpt, out, mode)
    os.kill(p.pid, sig)
    os.kill(p.pid, signal.SIGCONT)
    _, err = p.communicate(timeout=60)
    assert p.returncode in (-sig, 128 + sig), (p.returncode, err.decode()[-2000:])
    assert sorted(out.parent.iterdir()) == [out], "left behind: " + ", ".join(f.name for f in out.parent.iterdir())
    assert out.read_bytes() == OLD_OUTPUT
    assert not [f for f in ckpt.iterdir() if f.name.startswith(".")]


def test_an_interrupt_another_library_turned_into_an_error_still_ends_the_run_as_an_interrupt(monkeypatch, tmp_path):
    """Ctrl-C while torch builds a tensor: torch's C++ turns the KeyboardInterrupt into a TypeError, the checkpoint
    reader reports that as a ConversionError naming the tensor (seen in CI: the SIGINT case above exited 1 with "could
    not determine the shape of object type 'torch.storage.UntypedStorage'"). The command line must still end as an
    interrupt (130 / -SIGINT), not as bad input; the same error without an interrupt stays bad input (1)."""
    from glm5next_convert import cli
    from glm5next_convert.checkpoint import ConversionError

    def swallowed_interrupt(*_args, **_kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs here
        except KeyboardInterrupt:
            pass
        raise ConversionError("model.embed_tokens.weight (could not determine the shape of object type ...)")

    def bad_input(*_args, **_kwargs):
        raise ConversionError("model.embed_tokens.weight (could not determine the shape of object type ...)")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(cli, "convert", swallowed_interrupt)
        with pytest.raises(KeyboardInterrupt):
            cli.main([str(tmp_path), "--no-progress"])
        monkeypatch.setattr(cli, "convert", bad_input)
        assert cli.main([str(tmp_path), "--no-progress"]) == 1
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored after the run
    finally:
        signal.signal(signal.SIGINT, previous)
