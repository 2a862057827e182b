"""ggml's log lines as the native module passes them on (csrc/runtime/ggml_log.h): errors, warnings and info on stderr,
debug lines (ggml-cuda's at every graph it runs) and their continuations dropped unless GLM5NEXT_GGML_DEBUG=1 asks
for them. Each case in a fresh process: the filter is installed when the module loads, from the environment then."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

LINES = [("debug", "DEBUG-LINE\n"), ("cont", "DEBUG-CONTINUED\n"), ("warn", "WARN-LINE "), ("cont", "WARN-CONTINUED\n"),
         ("info", "INFO-LINE\n"), ("error", "ERROR-LINE\n")]
CODE = ("from glm5next_runtime import _core, _testing\n"
        f"for level, text in {LINES!r}:\n"
        "    _testing.ggml_log(level, text)\n")


def _stderr(debug: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GLM5NEXT_GGML_DEBUG"}
    if debug is not None:
        env["GLM5NEXT_GGML_DEBUG"] = debug
    done = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.parametrize("debug", [None, "0"])
def test_debug_lines_and_their_continuations_are_dropped(debug):
    assert _stderr(debug) == "WARN-LINE WARN-CONTINUED\nINFO-LINE\nERROR-LINE\n"


def test_debug_lines_when_asked():
    assert _stderr("1") == "".join(text for _, text in LINES)


def test_an_unknown_level_is_refused_by_name():
    from glm5next_runtime import _testing
    with pytest.raises(ValueError, match='level "trace" is not debug, info, warn, error or cont'):
        _testing.ggml_log("trace", "x\n")
