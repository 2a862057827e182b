"""The loader's rules, applied before any tensor is written: the metadata the converter is about to write goes to
a small scratch GGUF (no tensors) that the C++ loader's own hyper-parameter reader checks
(glm5next_runtime._core.read_hparams). The rules have one home, the loader; a config it would refuse (index_topk
0, more experts used than exist, ...) fails here in about a second instead of after writing hundreds of GB.
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import gguf

from .errors import ConversionError
from .hparams import CONFIG_FIELD_OF_KEY

_KEY = re.compile(r"^(?:key (?P<key>\S+): |required key (?P<missing>\S+) is missing)")


def check(arch: str, add_metadata: Callable[[gguf.GGUFWriter], None], log: Callable[[str], None]) -> None:
    """Write what `add_metadata(writer)` adds to a GGUFWriter for `arch` (key-value pairs only) to a scratch
    file and read its hyper-parameters with the loader's rules. The scratch file has no name where the OS allows
    (nothing is left behind) and is gone when this returns.

    Raises ConversionError naming the config.json field behind the GGUF key the loader refuses (and the key
    and the loader's reason). Logs a warning and checks nothing when glm5next_runtime._core cannot be imported.
    """
    try:
        from glm5next_runtime import _core
    except ImportError as e:
        log(f"warning: the loader's rules are not checked before writing (glm5next_runtime._core: {e})")
        return
    w = gguf.GGUFWriter(path=None, arch=arch)
    add_metadata(w)
    with _scratch_path() as path:
        w.write_header_to_file(Path(path))
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        try:
            _core.read_hparams(path, [])
        except _core.ModelError as e:
            raise ConversionError(_explain(str(e).removeprefix(f"{path}: "), arch)) from None


def _explain(reason: str, arch: str) -> str:
    """'config.json: field index_topk: the loader refuses the value written from it (key glm5next....: ...)'."""
    m = _KEY.match(reason)
    key = m and (m.group("key") or m.group("missing"))
    field = CONFIG_FIELD_OF_KEY.get(key.removeprefix(arch + ".")) if key else None
    if field is None:
        return f"config.json: the loader refuses the metadata written from it ({reason})"
    return f"config.json: field {field}: the loader refuses the value written from it ({reason})"


@contextlib.contextmanager
def _scratch_path() -> Iterator[str]:
    """A path for the scratch file: /proc/self/fd/N of a nameless temporary file on Linux, else a named one
    removed afterwards. Raises ConversionError when the temporary directory cannot hold it."""
    try:
        if Path("/proc/self/fd").is_dir():
            with tempfile.TemporaryFile() as f:  # O_TMPFILE, or unlinked at once: nothing to clean up
                yield f"/proc/self/fd/{f.fileno()}"
            return
        fd, name = tempfile.mkstemp(suffix=".gguf")
        os.close(fd)
        try:
            yield name
        finally:
            os.unlink(name)
    except OSError as e:
        raise ConversionError(f"{tempfile.gettempdir()}: cannot write the scratch file for the loader's check "
                              f"({e.strerror or e})") from e
