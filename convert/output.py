"""Writing the output file atomically: it appears complete under its name, or not at all, and an earlier file of
that name stays untouched until then.

On Linux the file is written with no name (O_TMPFILE) and linked into place when complete, so nothing is left
behind whatever ends the process, SIGKILL included. Where that is unsupported (another OS, or a filesystem
without O_TMPFILE) it is written under a hidden temporary name next to the output, removed on an error, on
SIGINT (KeyboardInterrupt) and on SIGTERM/SIGHUP (handlers that remove it and then die of the signal as usual);
only SIGKILL can leave that one behind.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import signal
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from .errors import ConversionError

PROC_FD = Path("/proc/self/fd")
O_TMPFILE = getattr(os, "O_TMPFILE", None)  # None: this OS has none (tests set it so to exercise the fallback)
CLEANUP_SIGNALS = tuple(getattr(signal, s) for s in ("SIGTERM", "SIGHUP") if hasattr(signal, s))


def write_atomically(out: Path, write: Callable[[str], None]) -> None:
    """Call `write(path)`, which writes the whole file by opening `path` (mode "wb"), then put that file at `out`
    in one step (replacing an existing file atomically). Missing parent directories are created, and removed
    again when the write fails.

    Raises ConversionError naming `out` when an OS error (read-only or missing directory, disk full,
    permissions) stops it; whatever `write` raises propagates. In every failing case nothing is left at `out`'s
    directory and an existing `out` is unchanged.
    """
    made = _make_parents(out.parent)
    ok = False
    try:
        with _unnamed(out) as (path, commit):
            write(path)
            commit()
        ok = True
    except OSError as e:
        raise ConversionError(f"{out}: cannot write the output ({e.strerror or e})") from e
    finally:
        if not ok:
            _remove_empty(made)


@contextlib.contextmanager
def _unnamed(out: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """(path to write, commit) for a file with no name in out's directory, or a hidden temporary one."""
    fd = _open_tmpfile(out.parent)
    if fd is None:
        with _named_temp(out) as pair:
            yield pair
        return
    try:
        yield str(PROC_FD / str(fd)), lambda: _link(fd, out)
    finally:
        os.close(fd)


def _open_tmpfile(directory: Path) -> int | None:
    """A write descriptor of a new unnamed file in `directory` (mode 0o666 less the umask, as any new file), or
    None where O_TMPFILE or /proc/self/fd is unavailable."""
    if O_TMPFILE is None or not PROC_FD.is_dir():
        return None
    try:
        return os.open(directory, O_TMPFILE | os.O_WRONLY, 0o666)
    except OSError:  # EOPNOTSUPP / EISDIR / EINVAL: this filesystem has no O_TMPFILE; real errors recur below
        return None


def _link(fd: int, out: Path) -> None:
    """Give the unnamed file `fd` the name `out`: linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N, straight to `out`
    when it does not exist, else to a temporary name renamed over `out` (atomic replacement)."""
    proc = os.open(PROC_FD, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            # src_dir_fd makes os.link call linkat(), which follows the /proc magic link to the file itself
            os.link(str(fd), out, src_dir_fd=proc, follow_symlinks=True)
            return
        except FileExistsError:
            pass
        tmp = out.parent / f".{out.name}.{secrets.token_hex(6)}.tmp"  # linkat never follows or overwrites it
        os.link(str(fd), tmp, src_dir_fd=proc, follow_symlinks=True)
        try:
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        os.close(proc)


@contextlib.contextmanager
def _named_temp(out: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """The fallback: a hidden `.<name>.*.tmp` next to `out`, removed unless committed, SIGTERM/SIGHUP included."""
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)

    def commit() -> None:
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)  # mkstemp made it private; the result gets the usual permissions
        os.replace(tmp, out)

    previous = _remove_on_signals(tmp)
    try:
        yield name, commit
    finally:
        tmp.unlink(missing_ok=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _remove_on_signals(tmp: Path) -> dict:
    """Handlers for CLEANUP_SIGNALS that remove `tmp`, then let the signal end the process as it would have.
    Only signals still at their default action get one (an ignored SIGHUP under nohup stays ignored, a caller's
    own handler stays), and only in the main thread (where Python allows it). Returns {signal: previous}."""
    def handler(signum, _frame):
        tmp.unlink(missing_ok=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    previous = {}
    for sig in CLEANUP_SIGNALS:
        try:
            if signal.getsignal(sig) is signal.SIG_DFL:
                previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            break
    return previous


def _make_parents(directory: Path) -> list[Path]:
    """Create `directory` and its missing parents; returns the ones created, deepest first."""
    made = []
    d = directory
    while not d.exists() and d != d.parent:
        made.append(d)
        d = d.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConversionError(f"{directory}: cannot create the output directory ({e.strerror or e})") from e
    return made


def _remove_empty(dirs: list[Path]) -> None:
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return
