"""Fuzzed GGUF files (issue 14): mutated metadata values and corrupted header bytes either fail to load with a
ValueError (ModelError naming the file) or load and then evaluate tokens; nothing crashes the process. Seeded and
bounded: each surface runs its cases in one subprocess (so that an abort in ggml shows up as a failed test naming
the case, not a dead session)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf
import pytest
from gguf import GGUFValueType as VT

from test_model_load import rewrite

SEED = 14

# Loads each (path, overrides) case; a file that loads evaluates 3 tokens, then 1 (prefill and decode graphs).
PROBE = textwrap.dedent("""
    import json, sys
    from glm5next_runtime import Model
    for i, (path, overrides) in enumerate(json.loads(open(sys.argv[1]).read())):
        print(json.dumps({"start": i}), flush=True)
        try:
            m = Model(path, n_ctx=64, n_batch=16, n_threads=1, override_kv=overrides)
        except ValueError as e:
            print(json.dumps({"case": i, "load_error": str(e)}), flush=True)
            continue
        except Exception as e:
            print(json.dumps({"case": i, "other_error": type(e).__name__ + ": " + str(e)}), flush=True)
            continue
        try:
            m.eval([0, 1, 2])
            m.eval([3])
            print(json.dumps({"case": i, "ok": True}), flush=True)
        except Exception as e:
            print(json.dumps({"case": i, "eval_error": type(e).__name__ + ": " + str(e)}), flush=True)
""")


def _probe(cases: list[tuple[str, list[str]]], tmp: Path) -> list[dict]:
    arg = tmp / "cases.json"
    arg.write_text(json.dumps(cases))
    r = subprocess.run([sys.executable, "-c", PROBE, str(arg)], capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    started = [x["start"] for x in lines if "start" in x]
    results = {x["case"]: x for x in lines if "case" in x}
    if r.returncode != 0:
        last = started[-1] if started else None
        pytest.fail(f"the loader process died (rc {r.returncode}) on case {last}: {cases[last] if last is not None else ''}"
                    f"\n{r.stderr[-3000:]}")
    assert len(results) == len(cases)
    return [results[i] for i in range(len(cases))]


@pytest.fixture(scope="module")
def tiny(checkpoints) -> Path:
    return checkpoints.convert(checkpoints.make("load-tiny", dtype="f32"), outtype="f32")


def _scalar_mutations(rng: random.Random, field: gguf.ReaderField) -> list:
    """Values of the field's own type (what --override-kv can set) a hostile file might hold."""
    t = field.types[0]
    if t in (VT.UINT8, VT.UINT16, VT.UINT32, VT.UINT64, VT.INT8, VT.INT16, VT.INT32, VT.INT64):
        v = int(field.contents())
        return [f"int:{x}" for x in (0, 1, -1, 2**31, 2**32 - 1, 2**63 - 1, v * 1000 + 1, rng.randrange(2**20))]
    if t in (VT.FLOAT32, VT.FLOAT64):
        return [f"float:{x}" for x in ("nan", "inf", "-inf", "-1", "0", "1e30", "-1e-30", str(rng.uniform(-10, 10)))]
    if t == VT.BOOL:
        return ["bool:" + ("false" if field.contents() else "true")]
    return []


def test_every_metadata_value_mutated_fails_at_load_or_runs(tiny, tmp_path):
    """Every scalar key of the file, set to extreme values of its type through --override-kv (the path a file and a
    user share): ModelError at load naming the key, or a model that evaluates. Covers every hyper-parameter."""
    rng = random.Random(SEED)
    reader = gguf.GGUFReader(tiny)
    cases = []
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.types[0] in (VT.ARRAY, VT.STRING):
            continue
        for value in _scalar_mutations(rng, field):
            cases.append((str(tiny), [f"{field.name}={value}"]))
    assert len(cases) > 200
    for (path, overrides), result in zip(cases, _probe(cases, tmp_path)):
        assert "other_error" not in result and "eval_error" not in result, (overrides, result)
        if "load_error" in result:  # names the file and a key (this one or one it conflicts with) or a tensor
            message = result["load_error"]
            culprit = any(c in message for c in (" key ", " tensor ", "--override-kv"))
            assert message.startswith(path) and culprit, (overrides, result)


def test_every_array_and_type_changed_fails_at_load_or_runs(tiny, tmp_path):
    """Arrays cut short, grown or of another element type, and keys stored as another type, in rewritten files."""
    reader = gguf.GGUFReader(tiny)
    cases = []
    for n, field in enumerate(reader.fields.values()):
        if field.name.startswith("GGUF.") or field.name.startswith("tokenizer.") or field.name == "general.architecture":
            continue
        variants = {"as-str": (VT.STRING, "12"), "as-f32": (VT.FLOAT32, 1.5), "as-bool": (VT.BOOL, True)}
        if field.types[0] == VT.ARRAY:
            items = list(field.contents())
            sub = field.types[-1]
            variants |= {"short": (VT.ARRAY, items[:-1], sub), "long": (VT.ARRAY, items + items[-1:], sub),
                         "as-i64-array": (VT.ARRAY, [2**40] * len(items), VT.INT64)}
        for tag, change in variants.items():
            dst = rewrite(tiny, tmp_path / f"{n}-{tag}.gguf", set_keys={field.name: change})
            cases.append((str(dst), []))
    for (path, _), result in zip(cases, _probe(cases, tmp_path)):
        assert "other_error" not in result and "eval_error" not in result, (path, result)
        if "load_error" in result:
            assert path in result["load_error"], result


def test_corrupted_header_bytes_fail_at_load_or_run(tiny, tmp_path):
    """Random bytes of the header (counts, lengths, types, values, tensor infos) overwritten: ModelError or a model
    that evaluates; never a crash or a hang."""
    rng = random.Random(SEED)
    data = bytearray(tiny.read_bytes())
    header_end = gguf.GGUFReader(tiny).data_offset
    cases = []
    for i in range(150):
        mutant = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4])):
            pos = rng.randrange(4, header_end)  # the magic is covered by test_model_load
            mutant[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        path = tmp_path / f"bytes-{i}.gguf"
        path.write_bytes(mutant)
        cases.append((str(path), []))
    results = _probe(cases, tmp_path)
    for (path, _), result in zip(cases, results):
        assert "other_error" not in result and "eval_error" not in result, (path, result)
        if "load_error" in result:
            assert path in result["load_error"], result
    assert sum("load_error" in r for r in results) > 50  # the corruption was seen, not skipped
