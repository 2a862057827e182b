"""The files the converter reads, checked before it opens them: each is a regular file (a FIFO or a device would
block or never end), and the output is none of them (the converter never writes over its own input)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .errors import ConversionError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """'a FIFO', 'a directory', ... for an st_mode that is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_file(path: Path, required: bool, why: str = "") -> Path | None:
    """`path` when it is a regular file (symbolic links followed), None when it does not exist and is not
    `required`. Raises ConversionError naming the path when it exists but is not a regular file (FIFO, device,
    socket, directory), cannot be examined, or is required and missing (`why` is added to that message)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if required:
            raise ConversionError(f"{path}: missing{f' ({why})' if why else ''}") from None
        return None
    except OSError as e:
        raise ConversionError(f"{path}: cannot examine it ({e.strerror})") from e
    if not stat.S_ISREG(st.st_mode):
        raise ConversionError(f"{path}: is {kind_of(st.st_mode)}, not a regular file; refusing to read it")
    return path


def read_json(path: Path):
    """The parsed JSON document at `path` (a regular file). Raises ConversionError naming the path when it
    cannot be read or is not JSON (invalid UTF-8, syntax, nesting too deep)."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise ConversionError(f"{path}: cannot read it ({e.strerror})") from e
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ConversionError(f"{path}: not valid JSON ({str(e) or type(e).__name__})") from e


def check_output(out: Path, inputs: list[Path]) -> None:
    """Refuse an output path that is one of `inputs` (compared by resolved path and by device and inode, so
    symbolic and hard links count), a directory, or an existing file that is not a regular file.

    Raises ConversionError naming the output path and, when it is an input, which input.
    """
    try:
        st = out.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise ConversionError(f"--outfile {out}: a parent of it is not a directory") from None
    except OSError as e:
        raise ConversionError(f"--outfile {out}: cannot examine it ({e.strerror})") from e
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ConversionError(f"--outfile {out}: is {kind_of(st.st_mode)}; the output must be a regular file path")
    resolved = out.resolve()
    for f in inputs:
        same = f.resolve() == resolved
        if not same and st is not None:
            try:
                same = os.path.samefile(out, f)
            except OSError:
                same = False
        if same:
            raise ConversionError(f"--outfile {out}: is the converter's input {f}; refusing to write over it "
                                  f"(choose another output path)")
