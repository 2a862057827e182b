"""OS errors on the output (issue 14): a read-only directory, a full disk, an output path that is a directory or
sits under a file give one error line naming the path (exit code 1), never a traceback, and leave nothing
behind. The output has no name until it is complete (O_TMPFILE), and the named-temp fallback still works."""
from __future__ import annotations

import errno
import os
import stat
import subprocess
from pathlib import Path

import pytest

from convert_checks import OLD_OUTPUT, assert_nothing_written, assert_refused, error_line, fresh_copy, run_main
from test_convert_roundtrip import meta


@pytest.fixture
def job(checkpoints, tmp_path):
    return fresh_copy(checkpoints.make("bad-base", dtype="f32"), tmp_path)


@pytest.fixture
def tmpfs(tmp_path):
    """mount(dir, *options) -> a fresh tmpfs at dir (root only; skips where mounting is not allowed)."""
    mounted = []

    def mount(d: Path, *options: str) -> Path:
        d.mkdir(exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options or ("size=1m",)), "tmpfs", str(d)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); the in-process variant covers this")
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", str(d)], check=True)


def test_outfile_that_is_a_directory_is_refused(job, capsys):
    ckpt, out = job
    (out.parent / "dir.gguf").mkdir()
    rc, err = run_main(ckpt, out.parent / "dir.gguf", capsys)
    assert rc == 1 and f"{out.parent / 'dir.gguf'}: is a directory" in err and "Traceback" not in err
    assert sorted(out.parent.iterdir()) == [out.parent / "dir.gguf", out] and out.read_bytes() == OLD_OUTPUT


def test_outfile_under_a_regular_file_is_refused(job, capsys):
    ckpt, out = job
    rc, err = run_main(ckpt, out / "x.gguf", capsys)
    assert rc == 1 and f"{out / 'x.gguf'}: a parent of it is not a directory" in error_line(err)
    assert_nothing_written(out)


def test_missing_output_directories_are_created_and_removed_again_on_failure(job, capsys, monkeypatch):
    """The converter makes missing parents; when the write then fails they go too (nothing written)."""
    from glm5next_convert import converter

    ckpt, out = job
    monkeypatch.setattr(converter._EncodedTensor, "tofile", _raise(errno.ENOSPC))
    target = out.parent / "a" / "b" / "model.gguf"
    assert_refused(ckpt, target, capsys, str(target), "No space left on device", old=None)
    assert not (out.parent / "a").exists()


def test_readonly_output_directory_gives_one_error_line(job, capsys, tmpfs):
    ckpt, out = job
    ro = out.parent / "ro"
    if os.geteuid() == 0:  # root writes through permission bits: a read-only mount it is (room enough: the
        tmpfs(ro, "size=16m", "ro")  # free-space check passes, the write fails)
    else:
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    assert_refused(ckpt, ro / "model.gguf", capsys, str(ro / "model.gguf"), "cannot write the output",
                   old=None)


def test_a_filesystem_without_room_is_refused_before_the_first_byte(job, capsys, tmpfs):
    """A 1 MiB tmpfs for a 2 MiB output: refused before writing (issue 50: the output's size is known before the
    first byte), naming what it needs and what is free; the earlier output there survives."""
    ckpt, out = job
    small = tmpfs(out.parent / "small", "size=1m")
    (small / "model.gguf").write_bytes(OLD_OUTPUT)
    assert_refused(ckpt, small / "model.gguf", capsys, str(small / "model.gguf"), "the output needs", "GiB free",
                   "nothing was written")


def test_the_plan_names_the_sizes_and_a_full_filesystem_is_refused_in_process(job, capsys, monkeypatch):
    """The same where mounting is not allowed (the free space reported small); the plan line gives the output's
    size by type before anything is written."""
    import shutil
    ckpt, out = job
    target = out.parent / "new.gguf"
    usage = shutil.disk_usage(out.parent)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=100_000))
    rc, err = run_main(ckpt, target, capsys)
    assert rc == 1 and f"--outfile {target}: the output needs" in err and "has 0.00 GiB free (100000 bytes)" in err
    assert "Traceback" not in err and not target.exists()
    monkeypatch.undo()
    rc, err = run_main(ckpt, target, capsys)
    assert rc == 0 and target.exists()


def _raise(code: int):
    def tofile(self, fp):
        raise OSError(code, os.strerror(code))
    return tofile


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EDQUOT])
def test_write_error_mid_file_gives_one_error_line(job, capsys, monkeypatch, code):
    """The same in-process, wherever mounting is not allowed: the first tensor's write fails."""
    from glm5next_convert import converter

    ckpt, out = job
    monkeypatch.setattr(converter._EncodedTensor, "tofile", _raise(code))
    assert_refused(ckpt, out, capsys, str(out), "cannot write the output", os.strerror(code))


def watch_directory(directory, monkeypatch) -> list[list[str]]:
    """The names in `directory` each time the converter writes a tensor (filled while it converts)."""
    from glm5next_convert import converter

    seen: list[list[str]] = []
    real = converter._EncodedTensor.tofile

    def tofile(self, fp):
        seen.append(sorted(p.name for p in directory.iterdir()))
        real(self, fp)

    monkeypatch.setattr(converter._EncodedTensor, "tofile", tofile)
    return seen


def test_output_has_no_name_until_complete(job, monkeypatch):
    """While tensors are written, the output directory shows only the earlier file: the new one has no name (no
    `.model.gguf.*.tmp` for a kill -9 to leave behind)."""
    from glm5next_convert import convert

    ckpt, out = job
    seen = watch_directory(out.parent, monkeypatch)
    convert(ckpt, out, outtype="f32", progress=False, log=lambda m: None)
    assert seen and all(names == ["model.gguf"] for names in seen), seen[:3]
    assert out.read_bytes()[:4] == b"GGUF" and meta(out)["glm5next.block_count"] == 5
    assert sorted(out.parent.iterdir()) == [out]


def test_output_gets_the_usual_permissions(job):
    from glm5next_convert import convert

    ckpt, out = job
    out.unlink()
    old = os.umask(0o027)
    try:
        convert(ckpt, out, outtype="f32", progress=False, log=lambda m: None)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


def test_named_temp_fallback_without_o_tmpfile(job, monkeypatch):
    """Where O_TMPFILE is missing (another OS), the output is written under a hidden temporary name and renamed;
    it replaces the earlier file, with the usual permissions, and leaves nothing else."""
    from glm5next_convert import convert, output

    ckpt, out = job
    monkeypatch.setattr(output, "O_TMPFILE", None)
    seen = watch_directory(out.parent, monkeypatch)
    old = os.umask(0o022)
    try:
        convert(ckpt, out, outtype="f32", progress=False, log=lambda m: None)
    finally:
        os.umask(old)
    assert len(seen[0]) == 2 and seen[0][0].startswith(".model.gguf.") and seen[0][0].endswith(".tmp")
    assert sorted(out.parent.iterdir()) == [out] and out.read_bytes()[:4] == b"GGUF"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_named_temp_fallback_removes_its_file_on_error(job, capsys, monkeypatch):
    from glm5next_convert import converter, output

    ckpt, out = job
    monkeypatch.setattr(output, "O_TMPFILE", None)
    monkeypatch.setattr(converter._EncodedTensor, "tofile", _raise(errno.ENOSPC))
    assert_refused(ckpt, out, capsys, "No space left on device")
    assert_nothing_written(out)
