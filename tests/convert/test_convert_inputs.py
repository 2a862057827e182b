"""The converter's inputs (issue 14): it never writes over a file it reads (compared by resolved path and by
device/inode, so links count), and it refuses an input that is not a regular file (a FIFO would block it)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from convert_checks import OLD_OUTPUT, assert_nothing_written, error_line, fresh_copy, run_main


def digest(d) -> dict[str, str]:
    """name -> sha256 of every file in directory d."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "not a file"
            for p in sorted(d.iterdir())}


def assert_input_untouched(ckpt, out, capsys, needle: str) -> None:
    """The CLI refuses `out` with one error line holding `needle`; the checkpoint directory is unchanged
    (same names, same bytes: no temporary file either)."""
    before = digest(ckpt)
    rc, err = run_main(ckpt, out, capsys)
    assert rc == 1 and needle in error_line(err), err
    assert digest(ckpt) == before


@pytest.fixture
def single(checkpoints, tmp_path):
    return fresh_copy(checkpoints.make("bad-base", dtype="f32"), tmp_path)


@pytest.fixture
def sharded(checkpoints, tmp_path):
    ckpt, out = fresh_copy(checkpoints.make("rt-f32-sharded", dtype="f32", shards=3), tmp_path)
    (ckpt / "chat_template.jinja").write_text("{{ messages }}")
    return ckpt, out


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"])
def test_outfile_that_is_an_input_is_refused(single, capsys, name):
    ckpt, _ = single
    assert_input_untouched(ckpt, ckpt / name, capsys, f"--outfile {ckpt / name}: is the converter's input")


@pytest.mark.parametrize("name", ["model-00002-of-00003.safetensors", "model.safetensors.index.json",
                                  "chat_template.jinja"])
def test_outfile_that_is_a_shard_index_or_template_is_refused(sharded, capsys, name):
    ckpt, _ = sharded
    assert_input_untouched(ckpt, ckpt / name, capsys, f"--outfile {ckpt / name}: is the converter's input")


@pytest.mark.parametrize("how", ["hard link", "symlink", "symlinked directory", "dot-dot path"])
def test_outfile_linked_to_an_input_is_refused(single, capsys, tmp_path, how):
    """The same file under another name: a hard link (same inode), a symbolic link to it, a path through a
    symlinked directory, a path with `..`."""
    ckpt, out = single
    target = ckpt / "model.safetensors"
    if how == "hard link":
        alias = out.parent / "alias.gguf"
        os.link(target, alias)
    elif how == "symlink":
        alias = out.parent / "alias.gguf"
        alias.symlink_to(target)
    elif how == "symlinked directory":
        (tmp_path / "via").symlink_to(ckpt)
        alias = tmp_path / "via" / "model.safetensors"
    else:
        alias = out.parent / ".." / "ckpt" / "model.safetensors"
    before = digest(ckpt)
    rc, err = run_main(ckpt, alias, capsys)
    assert rc == 1 and "is the converter's input" in error_line(err) and str(target) in err
    assert digest(ckpt) == before
    assert out.read_bytes() == OLD_OUTPUT


def test_outfile_in_the_checkpoint_directory_is_allowed(single, capsys):
    """Not an input: the default output goes there too."""
    ckpt, _ = single
    rc, err = run_main(ckpt, ckpt / "new.gguf", capsys)
    assert rc == 0, err
    assert (ckpt / "new.gguf").read_bytes()[:4] == b"GGUF"


# --------------------------------------------------------------------------------------- non-regular inputs

def run_cli_with_timeout(ckpt, out) -> subprocess.CompletedProcess:
    """In a subprocess with a timeout, so that a converter that blocks on a FIFO fails the test instead of
    hanging the session."""
    return subprocess.run([sys.executable, "-m", "glm5next_convert.cli", str(ckpt), "--outfile", str(out),
                           "--outtype", "f32", "--no-progress"], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                  "model.safetensors.index.json", "extra.safetensors"])
def test_fifo_among_the_inputs_is_refused(single, name):
    ckpt, out = single
    (ckpt / name).unlink(missing_ok=True)
    os.mkfifo(ckpt / name)
    r = run_cli_with_timeout(ckpt, out)
    assert r.returncode == 1, r.stderr
    line = error_line(r.stderr)
    assert str(ckpt / name) in line and "is a FIFO, not a regular file" in line
    assert_nothing_written(out)


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_device_or_directory_among_the_inputs_is_refused(single, name):
    """A symlink to /dev/zero (would read forever) or a directory where a file belongs."""
    ckpt, out = single
    (ckpt / name).unlink()
    (ckpt / name).symlink_to("/dev/zero")
    r = run_cli_with_timeout(ckpt, out)
    assert r.returncode == 1 and "is a character device" in error_line(r.stderr)
    (ckpt / name).unlink()
    (ckpt / name).mkdir()
    r = run_cli_with_timeout(ckpt, out)
    assert r.returncode == 1 and "is a directory, not a regular file" in error_line(r.stderr)
    assert_nothing_written(out)
