"""The command's name and its one error: BenchError, what glm5next-bench reports as `glm5next-bench: error: ...`
with exit status 2 (bad input or an unusable file), raised by any part of the bench."""
from __future__ import annotations

PROG = "glm5next-bench"


class BenchError(Exception):
    """Bad input or an unusable file: reported as `glm5next-bench: error: ...`, exit status 2."""
