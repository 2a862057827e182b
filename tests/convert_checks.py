"""Helpers for the converter's bad-input tests: a damaged copy of a checkpoint, config edits, and the converter's
command line run in-process, with the checks every refusal must pass (exit code 1, one error line, no traceback,
nothing written)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

OLD_OUTPUT = b"an earlier conversion"


def fresh_copy(src: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(checkpoint copy to damage, output path in its own directory that already holds OLD_OUTPUT)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(src, ckpt)
    out = tmp_path / "out" / "model.gguf"
    out.parent.mkdir()
    out.write_bytes(OLD_OUTPUT)
    return ckpt, out


def edit_config(ckpt: Path, text: dict | None = None, top: dict | None = None, drop: tuple[str, ...] = ()) -> None:
    """Set fields of config.json's text_config (`text`) and top level (`top`); remove text_config fields `drop`."""
    path = ckpt / "config.json"
    cfg = json.loads(path.read_text())
    cfg["text_config"].update(text or {})
    cfg.update(top or {})
    for k in drop:
        cfg["text_config"].pop(k, None)
    path.write_text(json.dumps(cfg))


def run_main(ckpt: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    """glm5next-convert's main() in-process: (exit code, stderr). An unexpected exception propagates."""
    from glm5next_convert.cli import main

    capsys.readouterr()
    rc = main([str(ckpt), "--outfile", str(out), "--outtype", "f32", "--no-progress", *extra])
    return rc, capsys.readouterr().err


def error_line(err: str) -> str:
    """The one `glm5next-convert: error:` line of stderr (asserts there is exactly one and no traceback)."""
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("glm5next-convert: error: ")]
    assert len(lines) == 1, err
    return lines[0]


def assert_nothing_written(out: Path, old: bytes | None = OLD_OUTPUT) -> None:
    """out's directory holds only the earlier output (unchanged), or nothing when there was none."""
    if old is None:
        assert not out.parent.exists() or list(out.parent.iterdir()) == [], list(out.parent.iterdir())
        return
    assert sorted(out.parent.iterdir()) == [out], f"left behind: {sorted(out.parent.iterdir())}"
    assert out.read_bytes() == old


def assert_refused(ckpt: Path, out: Path, capsys, *needles: str, old: bytes | None = OLD_OUTPUT) -> str:
    """The CLI refuses: exit code 1, one error line holding every needle, nothing written. Returns the line."""
    rc, err = run_main(ckpt, out, capsys)
    line = error_line(err)
    assert rc == 1, err
    for n in needles:
        assert n in line, (n, line)
    assert_nothing_written(out, old)
    return line
