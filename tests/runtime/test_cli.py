"""glm5next-cli (issue 5): the text on stdout equals the Python API's, streamed piece by piece; timings and the
draft acceptance go to stderr; bad flags and files exit non-zero with a message."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from glm5next_runtime import Model, cli

CLI = Path(sys.executable).parent / "glm5next-cli"
PROMPT = "Once upon a time"
TIMEOUT = 60


@pytest.fixture(scope="module")
def model(predictable_gguf) -> Model:
    """Fixed draft lengths, as the CLI's --spec-draft-adaptive off: seeded sampled output depends on them."""
    return Model(predictable_gguf, n_ctx=256, n_threads=1, draft_adaptive=False)


def run_cli(gguf: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "-m", str(gguf), "-t", "1", "-c", "256", *flags], capture_output=True,
                          text=True, timeout=TIMEOUT)


def test_greedy_text_and_report(predictable_gguf, model):
    """The report's acceptance figures, with fixed draft lengths: adaptive ones may draft nothing in 16 tokens (the
    policy opens with plain rounds and, priced by the costs timed at load, waits for probes where a verify row costs
    nearly a decode step, as on this f32 file: then every figure reads 0 and 1.000)."""
    want = model.generate(PROMPT, max_tokens=16, temperature=0)
    run = run_cli(predictable_gguf, "-p", PROMPT, "-n", "16", "--temp", "0", "--spec-draft-adaptive", "off")
    assert run.returncode == 0, run.stderr
    assert run.stdout == want.text + "\n"
    assert "speculation: draft-mtp" in run.stderr and "placement: CPU:" in run.stderr
    assert re.search(r"prompt eval: \d+ tokens in [\d.]+ ms \([\d.]+ tokens/s\)", run.stderr)
    assert "generation:  16 tokens in " in run.stderr and "finish: length" in run.stderr
    per_position = re.search(r"acceptance per position: ([\d. ]+);", run.stderr).group(1).split()
    assert len(per_position) == 3 and all(0 <= float(r) <= 1 for r in per_position)
    assert float(re.search(r"mean accepted length ([\d.]+)", run.stderr).group(1)) > 1


def test_spec_flags(predictable_gguf, model):
    want = model.generate(PROMPT, max_tokens=16, temperature=0).text + "\n"
    off = run_cli(predictable_gguf, "-p", PROMPT, "-n", "16", "--temp", "0", "--spec-type", "none")
    assert off.returncode == 0 and off.stdout == want
    assert "speculation: none (--spec-type none)" in off.stderr and "draft-mtp:" not in off.stderr
    one = run_cli(predictable_gguf, "-p", PROMPT, "-n", "16", "--temp", "0", "--spec-draft-n-max", "1")
    assert one.returncode == 0 and one.stdout == want
    assert len(re.search(r"acceptance per position: ([\d. ]+);", one.stderr).group(1).split()) == 1


def test_separate_draft_file_and_draft_type(checkpoints, predictable_gguf, model):
    """-md (a trunk-only -m file plus a --mtp-only draft file) and --spec-draft-type q4_0 keep the greedy text."""
    ckpt = checkpoints.make("spec-predictable", "predictable", dtype="f32")
    trunk = checkpoints.convert(ckpt, tag="-trunk", outtype="f32", layout="no-mtp")
    head = checkpoints.convert(ckpt, tag="-head", outtype="f32", layout="mtp-only")
    want = model.generate(PROMPT, max_tokens=16, temperature=0).text + "\n"
    split = run_cli(trunk, "-p", PROMPT, "-n", "16", "--temp", "0", "-md", str(head), "--spec-draft-type", "q4_0")
    assert split.returncode == 0, split.stderr
    assert split.stdout == want
    assert f"the NextN layer of {head}" in split.stderr and "draft type q4_0" in split.stderr


def test_seeded_sampling_matches_the_python_api(predictable_gguf, model):
    want = model.generate(PROMPT, max_tokens=12, temperature=1.0, seed=3).text + "\n"
    for _ in range(2):
        run = run_cli(predictable_gguf, "-p", PROMPT, "-n", "12", "--temp", "1.0", "--seed", "3",
                      "--spec-draft-adaptive", "off")
        assert run.returncode == 0 and run.stdout == want


class Recorder:
    """A stdout that keeps each write."""

    def __init__(self):
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_text_is_streamed(predictable_gguf, model, monkeypatch):
    out = Recorder()
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["-m", str(predictable_gguf), "-t", "1", "-c", "256", "-p", PROMPT, "-n", "16", "--temp", "0"]) == 0
    assert len(out.writes) > 2  # piece by piece, then the final newline
    assert "".join(out.writes) == model.generate(PROMPT, max_tokens=16, temperature=0).text + "\n"


@pytest.mark.parametrize("flags, code, message", [
    (["--spec-draft-type", "q5_k"], 2, "invalid choice"),
    (["-md", "/no/such/draft.predictable_gguf"], 1, "draft.predictable_gguf"),
    (["-n", "-2"], 2, "-n/--n-predict -2: must be >= -1"),
    (["-c", "4", "-n", "1"], 1, "more than the context holds"),
    (["--override-kv", "bad"], 1, "expected KEY=TYPE:VALUE"),
])
def test_errors(predictable_gguf, capsys, flags, code, message):
    argv = ["-m", str(predictable_gguf), "-t", "1", "-p", PROMPT, *flags]
    if code == 2:
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
    else:
        assert cli.main(argv) == 1
    assert message in capsys.readouterr().err


def test_missing_file():
    run = subprocess.run([str(CLI), "-m", "/no/such.predictable_gguf", "-p", "x"], capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert run.returncode == 1 and run.stderr.startswith("glm5next-cli: error: ") and "no such file" in run.stderr


def test_no_mmap_and_mlock_as_llama_server(predictable_gguf, model):
    """--no-mmap reads the file into memory, --mlock locks the weights (where the memory-lock limit allows: a warning
    otherwise, as llama-server): the same text, and the load log says how the weights came in and how long it took."""
    want = model.generate(PROMPT, max_tokens=8, temperature=0)
    run = run_cli(predictable_gguf, "-p", PROMPT, "-n", "8", "--temp", "0", "--no-mmap", "--mlock")
    assert run.returncode == 0, run.stderr
    assert run.stdout == want.text + "\n"
    assert re.search(r"load: weights read into memory \(--no-mmap\)(, locked in RAM)? in [\d.]+ s", run.stderr)
    assert "locked in RAM" in run.stderr or "could not be locked in RAM" in run.stderr
    run = run_cli(predictable_gguf, "-p", PROMPT, "-n", "1", "--temp", "0")
    assert re.search(r"load: weights mapped \(every page read in\) in [\d.]+ s", run.stderr)
