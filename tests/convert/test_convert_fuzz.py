"""Fuzzed converter inputs (issue 14): seeded mutations of config.json fields, safetensors headers and the tokenizer
files. Every case either converts to a file the loader accepts, or is refused with one error line (exit code 1,
no traceback); a refused case writes nothing (the earlier output intact, no temporary file in the output or the
temporary directory). The converter's command line runs in-process (main()), so an unexpected exception fails
the test naming the case. Each surface's case count is fixed (see CASES) and asserted."""
from __future__ import annotations

import json
import math
import random
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from convert_checks import OLD_OUTPUT, error_line, run_main

SEED = 14
CASES = {"config": 300, "safetensors": 240, "tokenizer": 120}
DELETE = object()

NUMBERS = [0, -1, 1, 2, 3, 7, 2**31, 2**32, 2**32 - 1, 2**64, 10**30, -(10**30), 10**400, 1e39, -1e-45, 0.5,
           1e-300, math.nan, math.inf, -math.inf]
STRINGS = ["", "no", "yes", "12", "NaN", "true", "\u0000", "é" * 300, "linear_attention", "full", "dense"]


def _junk(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value: scalars of every type, lists and objects nested a few levels deep."""
    r = rng.random()
    if depth > 3 or r < 0.5:
        return rng.choice(NUMBERS + STRINGS + [None, True, False])
    if r < 0.75:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(STRINGS + ["a", "b"]): _junk(rng, depth + 1) for _ in range(rng.randrange(3))}


def _mutated_value(rng: random.Random, old: Any) -> Any:
    """A value of another type, an out-of-range number, a missing key (DELETE) or nested junk in place of `old`."""
    kind = rng.randrange(7)
    if kind == 0:
        return DELETE
    if kind == 1:  # the same value under another JSON type
        options = [str(old), [old], {"v": old}, None, not old if isinstance(old, bool) else True]
        if isinstance(old, int) and not isinstance(old, bool):
            options.append(float(old))
        if isinstance(old, float) and math.isfinite(old):
            options.append(int(old))
        return rng.choice(options)
    if kind in (2, 3):
        return rng.choice(NUMBERS)
    if kind == 4:
        return rng.choice(STRINGS)
    if kind == 5 and isinstance(old, list) and old:  # one element changed, or the length
        new = list(old)
        if rng.random() < 0.5:
            new[rng.randrange(len(new))] = _junk(rng)
        else:
            new = new[:-1] if rng.random() < 0.5 else new + [new[-1]]
        return new
    if kind == 6 and rng.random() < 0.2:
        return json.loads("[" * 60 + "]" * 60)  # deep nesting
    return _junk(rng)


def _paths(doc: Any, prefix: tuple = (), depth: int = 0) -> list[tuple]:
    """Every key path of a JSON document (objects only, up to 3 levels)."""
    out = []
    if isinstance(doc, dict) and depth < 3:
        for k, v in doc.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,), depth + 1)
    return out


def _set(doc: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        doc = doc[k]
    if value is DELETE:
        doc.pop(path[-1], None)
    else:
        doc[path[-1]] = value


def mutate_json(rng: random.Random, text: str, extra_paths: list[tuple]) -> tuple[str, str]:
    """(new document text, description): 1 to 3 fields mutated, or (1 case in 8) the text itself broken."""
    if rng.random() < 0.125:
        how = rng.randrange(4)
        if how == 0:
            cut = rng.randrange(len(text))
            return text[:cut], f"truncated at {cut}"
        if how == 1:
            i = rng.randrange(len(text))
            return text[:i] + rng.choice("{}[]\",:x\\\x00") + text[i + 1:], f"character {i} replaced"
        if how == 2:
            return "[" * 100_000 + "]" * 100_000, "nested 100000 deep"
        return json.dumps(_junk(rng)), "not an object"
    doc = json.loads(text)
    paths = _paths(doc) + extra_paths
    changes = []
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
        path = rng.choice(paths)
        try:
            old = doc
            for k in path:
                old = old[k]
        except (KeyError, TypeError, IndexError):
            old = None
        value = _mutated_value(rng, old)
        try:
            _set(doc, path, value)
        except (KeyError, TypeError, IndexError, AttributeError):
            continue  # a parent was mutated away by an earlier change
        changes.append(f"{'.'.join(map(str, path))} = {'<deleted>' if value is DELETE else _short(value)}")
    return json.dumps(doc), "; ".join(changes)


def _short(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) < 80 else text[:80] + "..."


# ------------------------------------------------------------------------------------------ safetensors

def mutate_safetensors(rng: random.Random, blob: bytes) -> tuple[bytes, str]:
    """A corrupted safetensors file: its header length, JSON text, dtypes, offsets, shapes or entries."""
    (n,) = struct.unpack("<Q", blob[:8])
    header, data = json.loads(blob[8:8 + n]), blob[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    entry = header[name]
    kind = rng.choice(["length", "json", "dtype", "offsets", "shape", "drop", "rename", "metadata", "data"])
    if kind == "length":
        value = rng.choice([0, 1, 7, n - 1, n + 1, len(blob), 2**63, 2**64 - 1, rng.randrange(2**32)])
        return struct.pack("<Q", value) + blob[8:], f"header length {value} (real {n})"
    if kind == "json":
        text = blob[8:8 + n]
        how = rng.randrange(4)
        if how == 0:
            text, what = text[:rng.randrange(n)], "truncated JSON"
        elif how == 1:
            i = rng.randrange(n)
            text, what = text[:i] + bytes([rng.randrange(256)]) + text[i + 1:], f"JSON byte {i} replaced"
        elif how == 2:
            text, what = b"\xff\xfe" + text[2:], "not UTF-8"
        else:
            text, what = b"[" * 5000 + b"]" * 5000, "nested JSON"
        return struct.pack("<Q", len(text)) + text + data, what
    if kind == "dtype":
        entry["dtype"] = rng.choice(["I8", "U8", "I16", "I32", "U32", "I64", "BOOL", "F16", "F64", "BF16",
                                     "F8_E5M2", "F8_E4M3", "C64", "XX", "", 5, None])
        what = f"{name} dtype {entry['dtype']!r}"
    elif kind == "offsets":
        a, b = entry["data_offsets"]
        entry["data_offsets"] = rng.choice([[0, 2**40], [b, a], [-1, b], [a], "x", [a, a], [a + 1, b + 1],
                                            [0, len(data) + 100], [2**64, 2**64 + 4], [a, b + 4]])
        what = f"{name} data_offsets {entry['data_offsets']!r}"
    elif kind == "shape":
        s = entry["shape"]
        entry["shape"] = rng.choice([[], [0], [-1], [2**40, 2**40], "x", [1.5], s[::-1], s + [1], s + [2],
                                     [math.prod(s)], [math.prod(s) * 2], [2**64]])
        what = f"{name} shape {entry['shape']!r} (was {s})"
    elif kind == "drop":
        del header[name]
        what = f"{name} removed from the header"
    elif kind == "rename":
        header[name + ".x"] = header.pop(name)
        what = f"{name} renamed"
    elif kind == "metadata":
        header["__metadata__"] = rng.choice([{"format": 5}, [1], "x", {"format": None}, {"a": {"b": 1}}])
        what = f"__metadata__ = {header['__metadata__']!r}"
    else:
        cut = rng.choice([0, len(data) // 2, len(data) - 1, len(data) + 64])
        data = data[:cut] + (b"\0" * 64 if cut > len(data) else b"")
        what = f"data section {len(data)} bytes"
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data, what


# -------------------------------------------------------------------------------------------- the runs

@pytest.fixture(scope="module")
def base(checkpoints) -> Path:
    return checkpoints.make("bad-base", dtype="f32")


@pytest.fixture
def arena(base, tmp_path, monkeypatch):
    """(checkpoint copy, output path holding OLD_OUTPUT, scratch temporary directory)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base, ckpt)
    out = tmp_path / "out" / "model.gguf"
    out.parent.mkdir()
    out.write_bytes(OLD_OUTPUT)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return ckpt, out, scratch


def fuzz(arena, capsys, n: int, apply: Callable[[random.Random, Path], str], seed: int) -> dict[str, int]:
    """Run `n` cases: apply(rng, ckpt) damages the checkpoint copy (restored afterwards) and describes the
    damage. Returns {"refused": ..., "converted": ...}."""
    from glm5next_runtime import _core

    ckpt, out, scratch = arena
    originals = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    rng = random.Random(seed)
    counts = {"refused": 0, "converted": 0}
    for i in range(n):
        what = apply(rng, ckpt)
        case = f"case {i} ({what})"
        try:
            rc, err = run_main(ckpt, out, capsys)
        except Exception as e:  # noqa: BLE001 - the point: nothing may escape main()
            pytest.fail(f"{case}: {type(e).__name__}: {e}")
        assert rc in (0, 1), (case, rc, err)
        if rc == 1:
            line = error_line(err)
            assert len(line) < 2000, (case, line)
            assert out.read_bytes() == OLD_OUTPUT, case
            counts["refused"] += 1
        else:
            assert "Traceback" not in err, (case, err)
            _core.read_hparams(str(out), [])  # what the converter writes, the loader accepts
            out.write_bytes(OLD_OUTPUT)
            counts["converted"] += 1
        assert sorted(out.parent.iterdir()) == [out], (case, sorted(out.parent.iterdir()))
        assert list(scratch.iterdir()) == [], (case, list(scratch.iterdir()))
        for name, data in originals.items():
            (ckpt / name).write_bytes(data)
    print(f"fuzz: {n} cases: {counts}")  # shown with pytest -s
    return counts


def test_fuzzed_config_fields_are_refused_cleanly_or_convert(arena, capsys):
    ckpt = arena[0]
    text = (ckpt / "config.json").read_text()
    # fields the converter reads that the generated config leaves at their defaults
    extra = [("text_config", k) for k in ("index_share_for_mtp_iteration", "qk_rope_head_dim", "linear_num_heads",
                                          "linear_lower_bound", "tie_word_embeddings")]
    extra += [("quantization_config",), ("text_config", "linear_attn_config", "safe_gate")]

    def apply(rng, ckpt):
        new, what = mutate_json(rng, text, extra)
        (ckpt / "config.json").write_text(new)
        return what

    start = time.monotonic()
    counts = fuzz(arena, capsys, CASES["config"], apply, SEED)
    assert counts["refused"] > CASES["config"] // 2 and counts["converted"] > 0, counts
    assert time.monotonic() - start < 60


def test_fuzzed_safetensors_headers_are_refused_cleanly_or_convert(arena, capsys):
    ckpt = arena[0]
    blob = (ckpt / "model.safetensors").read_bytes()

    def apply(rng, ckpt):
        new, what = mutate_safetensors(rng, blob)
        (ckpt / "model.safetensors").write_bytes(new)
        return what

    start = time.monotonic()
    counts = fuzz(arena, capsys, CASES["safetensors"], apply, SEED + 1)
    assert counts["refused"] > CASES["safetensors"] // 2, counts
    assert time.monotonic() - start < 60


def test_fuzzed_tokenizer_files_are_refused_cleanly_or_convert(arena, capsys):
    ckpt = arena[0]
    tok = (ckpt / "tokenizer.json").read_text()
    tcfg = (ckpt / "tokenizer_config.json").read_text()
    doc = json.loads(tok)
    # a few vocab entries, added tokens and merges (the full path list is mostly vocab entries)
    vocab_keys = list(doc["model"]["vocab"])
    picks = [("model", "vocab", k) for k in vocab_keys[:5] + vocab_keys[-5:]]
    picks += [("added_tokens", i, f) for i in (0, 3) for f in ("content", "id", "special")]
    picks += [("model", "merges", i) for i in (0, 1)] + [("model",), ("model", "vocab"), ("added_tokens",)]

    def apply(rng, ckpt):
        if rng.random() < 0.25:
            new, what = mutate_json(rng, tcfg, [("chat_template",)])
            (ckpt / "tokenizer_config.json").write_text(new)
            return "tokenizer_config.json: " + what
        d = json.loads(tok)
        path = rng.choice(picks)
        value = _mutated_value(rng, None)
        try:
            _set(d, path, value)
        except (KeyError, TypeError, IndexError):
            pass
        (ckpt / "tokenizer.json").write_text(json.dumps(d))
        return f"tokenizer.json: {'.'.join(map(str, path))} = {'<deleted>' if value is DELETE else _short(value)}"

    start = time.monotonic()
    counts = fuzz(arena, capsys, CASES["tokenizer"], apply, SEED + 2)
    assert counts["refused"] > CASES["tokenizer"] // 3, counts
    assert time.monotonic() - start < 60
