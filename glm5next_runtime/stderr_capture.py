"""What C code writes to file descriptor 2 (llama.cpp logs there whatever its verbosity), kept out of a report and
shown only when something fails (glm5next-bench's llama-cpp-python rows)."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def captured_stderr() -> Iterator[Callable[[], str]]:
    """Redirect file descriptor 2 (C code included) into a temporary file; yields a reader of what was written."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)

        def read() -> str:
            tmp.flush()
            tmp.seek(0)
            return tmp.read().decode("utf-8", "replace")
        try:
            yield read
        finally:
            os.dup2(saved, 2)
            os.close(saved)
