"""glm5next-bench on a tiny converted checkpoint: rows, columns and report shape (never speed)."""
from __future__ import annotations

import csv
import io
import json
import math
import statistics

import numpy as np
import pytest

from glm5next_runtime import _testing, bench

SMALL = ["-p", "16", "-n", "4", "-d", "0,8", "-r", "2", "-t", "2", "-b", "8"]
TESTS = ["pp16", "tg4", "pp16 @ d8", "tg4 @ d8"]


@pytest.fixture(scope="module")
def tiny_q8(checkpoints):
    return checkpoints.convert(checkpoints.make("bench-tiny", "tiny"), outtype="q8_0", arch="glm5-next")


def _run(capsys, argv):
    rc = bench.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _positive_stats(s):
    assert s["tps_min"] > 0 and s["tps_max"] >= s["tps_median"] >= s["tps_min"]
    assert s["tps_stdev"] >= 0 and s["tps_mean"] > 0
    assert len(s["tps_samples"]) == len(s["seconds"]) == 2
    assert all(t > 0 for t in s["seconds"])


def test_json_with_llama_cpp(capsys, tiny_q8):
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), *SMALL, "--llama-cpp", "-o", "json"])
    assert rc == 0, err
    report = json.loads(out)
    assert report["engines"] == ["glm5next", "llama_cpp"]
    info = report["model"]
    assert info["threads"] == 2 and info["n_batch"] == 8 and info["backend"]
    assert info["params"] > 0 and 0 < info["size_bytes"] <= info["file_bytes"]
    assert info["model"].startswith("glm5-next") and info["model"].endswith("Q8_0")
    assert [r["test"] for r in report["rows"]] == TESTS
    for row in report["rows"]:
        assert row["n_depth"] == (8 if "@ d8" in row["test"] else 0)
        assert (row["n_prompt"], row["n_gen"]) == ((16, 0) if row["test"].startswith("pp") else (0, 4))
        _positive_stats(row["glm5next"])
        _positive_stats(row["llama_cpp"])
        assert row["ratio"] == pytest.approx(row["glm5next"]["tps_median"] / row["llama_cpp"]["tps_median"])
    stages = [m["stage"] for m in report["memory"]]
    assert stages[0].startswith("baseline") and len(stages) == 5
    assert any(s.startswith("glm5next loaded") for s in stages)
    assert all(m["VmRSS"] > 0 and m["RssAnon"] > 0 for m in report["memory"])
    assert "glm5next-bench" in err  # the tqdm bar goes to stderr


def test_markdown_table(capsys, tiny_q8):
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), *SMALL, "-r", "1", "--llama-cpp"])
    assert rc == 0, err
    lines = out.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["model", "size", "params", "backend", "threads", "test", "t/s", "llama.cpp t/s", "ratio"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:2 + len(TESTS)]]
    assert [r[5] for r in body] == TESTS
    for r in body:
        assert r[4] == "2"
        assert float(r[6].split("±")[0]) > 0 and float(r[7].split("±")[0]) > 0 and float(r[8]) > 0
    assert "RssAnon" in out and "memory-mapped" in out


def test_csv_ours_only_argmax(capsys, tiny_q8):
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), *SMALL, "--tg-tokens", "argmax", "--no-warmup", "-o", "csv"])
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["test"] for r in rows] == TESTS
    assert "ratio" not in rows[0] and not any(k.startswith("llama_cpp") for k in rows[0])
    assert all(float(r["glm5next_tps_median"]) > 0 for r in rows)
    assert "RssAnon" in err  # memory goes to stderr so stdout stays CSV


def test_zero_skips_a_kind(capsys, tiny_q8):
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-p", "0", "-n", "2,3", "-r", "1", "-o", "json"])
    assert rc == 0, err
    assert [r["test"] for r in json.loads(out)["rows"]] == ["tg2", "tg3"]


@pytest.mark.parametrize("argv, message", [
    (["-d", "0,x"], "-d must be a comma-separated list of integers"),
    (["-d", "0,-5"], "-d values must be >= 0"),
    (["-d", ""], "-d must be a comma-separated list of integers"),
    (["-p", "1.5"], "-p must be a comma-separated list"),
    (["-t", "0"], "-t must be >= 1"),
    (["-r", "two"], "-r must be an integer"),
    (["-o", "xml"], "invalid choice"),
    (["-p", "0", "-n", "0"], "nothing to run"),
])
def test_bad_arguments(capsys, tiny_q8, argv, message):
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), *argv])
    assert rc == 2
    assert message in err
    assert out == ""


def test_missing_file(capsys, tmp_path):
    rc, out, err = _run(capsys, ["-m", str(tmp_path / "nope.gguf")])
    assert rc == 2 and "model file not found" in err and "nope.gguf" in err


def test_not_a_gguf(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    rc, out, err = _run(capsys, ["-m", str(bad), "-r", "1"])
    assert rc == 2 and "cannot load" in err and "bad.gguf" in err


def test_upstream_cannot_load_native_arch(capsys, checkpoints):
    """A file written with the default (native) arch loads here but not upstream: clear error, exit 2."""
    path = checkpoints.convert(checkpoints.make("bench-tiny", "tiny"), tag="-native", outtype="q8_0")
    rc, out, err = _run(capsys, ["-m", str(path), "-p", "4", "-n", "2", "-r", "1", "--llama-cpp"])
    assert rc == 2 and "llama-cpp-python cannot load" in err and "--arch glm5-next" in err


def test_rows_are_name_callable_pairs():
    """Rows are (name, run, params); run(runner) times one repetition on anything with reset/eval/argmax."""
    class Counter:
        key = "fake"

        def __init__(self):
            self.fed = []

        def reset(self):
            self.fed = []

        def eval(self, tokens):
            self.fed += list(tokens)

        def argmax(self):
            return 7

    inputs = bench.Inputs(depth=list(range(10)), prompt=[1] * 5, gen=[2] * 4, tg_argmax=False)
    rows = bench.build_rows([5], [3], [0, 10], inputs)
    assert [r.name for r in rows] == ["pp5", "tg3", "pp5 @ d10", "tg3 @ d10"]
    fake = Counter()
    n, seconds = rows[3].run(fake)
    assert n == 3 and seconds >= 0 and fake.fed == list(range(10)) + [2, 2, 2]
    n, _ = rows[2].run(fake)
    assert n == 5 and fake.fed == list(range(10)) + [1] * 5


def test_the_speedup_is_the_geometric_mean_of_back_to_back_pairs_with_its_standard_error():
    logs = [math.log(2.0), math.log(0.5), math.log(1.0)]
    out = bench.paired_speedup(logs)
    assert out["speedup"] == pytest.approx(1.0)
    assert out["speedup_se"] == pytest.approx(statistics.stdev(logs) / math.sqrt(3))
    assert bench.paired_speedup([math.log(1.25)]) == {"speedup": pytest.approx(1.25), "speedup_se": 0.0}


def test_speculative_rows(capsys, tiny_q8):
    argv = ["-m", str(tiny_q8), "-p", "0", "-n", "6", "-r", "2", "-t", "2", "--spec-n-max", "2,3",
            "--spec-accept", "2.5", "--spec-index-share", "on,off", "--spec-draft-type", "auto,q4_0"]
    rc, out, err = _run(capsys, [*argv, "-o", "json"])
    assert rc == 0, err
    rows = json.loads(out)["spec_rows"]
    assert [r["test"] for r in rows] == [f"tg6 mtp{n} share {s}" + (" draft q4_0" if d else "")
                                         for n in (2, 3) for s in ("on", "off") for d in (False, True)]
    for r in rows:
        _positive_stats(r["spec"])
        _positive_stats(r["no_spec"])
        assert r["speedup"] > 0 and r["speedup_se"] >= 0 and r["first_speedup"] > 0
        assert 1.0 <= r["mean_accepted_length"] <= r["n_max"] + 1 and len(r["acceptance_per_position"]) == r["n_max"]
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and "draft-MTP (synthetic acceptance" in out and "tg6 mtp3 share off draft q4_0" in out
    assert _run(capsys, [*argv[:-8], "--spec-accept", "0.5"])[0] == 2


def test_first_rep_speedup_is_the_warm_up_pairs_alone(capsys, tiny_q8, monkeypatch):
    """first_speedup (issue 28: what a fresh process's first requests get) is the paired speedup of the first
    repetition, the warm-up; speedup that of the timed ones. Timings faked: the warm-up's drafted rounds take half
    the plain rounds' time, later ones the same."""
    calls = []
    stats = {"drafted_at": [1], "accepted_at": [1], "n_drafts": 1, "n_drafted": 1, "n_accepted": 1,
             "rounds_at_length": [0, 1], "draft_ms": 1.0, "verify_ms": 1.0}

    def spec_decode(self, prompt, n_gen, n_max, *args, **kwargs):
        calls.append(n_max)
        warm_up = len(calls) <= 2  # one pair per repetition (one prompt)
        return n_gen, 1.0 if n_max == 0 or not warm_up else 0.5, stats

    monkeypatch.setattr(bench.OursRunner, "spec_decode", spec_decode)
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-p", "0", "-n", "6", "-r", "2", "-t", "2", "--spec-n-max", "2",
                                 "-o", "json"])
    assert rc == 0, err
    row = json.loads(out)["spec_rows"][0]
    assert len(calls) == 6  # warm-up and 2 repetitions, a pair each
    assert row["first_speedup"] == pytest.approx(2.0) and row["first_speedup_se"] == 0.0
    assert row["speedup"] == pytest.approx(1.0)


def test_op_profile_times_the_graphs_of_a_generation_with_and_without_drafts(capsys, tiny_q8):
    """--op-profile: one generation without drafts runs one 1-row graph per token; one with 2 drafts a round (all
    kept: synthetic acceptance 3) a 3-row verify pass and draft steps per round; every graph kind's ops are timed."""
    argv = ["-m", str(tiny_q8), "-p", "0", "-n", "6", "-r", "1", "-t", "2", "--spec-n-max", "2", "--spec-accept", "3",
            "--op-profile"]
    rc, out, err = _run(capsys, [*argv, "-o", "json"])
    assert rc == 0, err
    profile = json.loads(out)["spec_rows"][0]["op_profile"]
    assert set(profile) == {"no drafts", "drafts"}
    assert {k: g["runs"] for k, g in profile["no drafts"].items()} == {"decode 1 row": 6}
    drafts = profile["drafts"]
    assert drafts["verify 3 rows"]["runs"] == 2  # 6 tokens, 3 a round
    assert any(k.startswith("draft step") for k in drafts)
    for graphs in profile.values():
        for g in graphs.values():
            assert all(ms > 0 and nodes >= g["runs"] for ms, nodes in g["ops"].values())
            assert {"MUL_MAT_ID q8_0", "MUL_MAT q8_0", "CUSTOM q8_0 rows", "CUSTOM q8_0 rows, experts"} & set(g["ops"])
    # a few-row group's rows each as alone: our q8_0 kernel where the CPU runs it, else ggml's mul_mat_id
    few_rows = "CUSTOM q8_0 rows" if _testing.q8_0_rows_kernel_available() else "MUL_MAT_ID q8_0 row by row"
    assert few_rows in drafts["verify 3 rows"]["ops"]
    # and its f16 matrices (MLA's kv_a, KDA's projections) by the f16 kernel, else the same mul_mat_id
    few_f16 = "CUSTOM f16 rows" if _testing.float_rows_kernel_available("f16") else "MUL_MAT_ID f16 row by row"
    assert few_f16 in drafts["verify 3 rows"]["ops"]
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and "op profile of tg6 mtp2" in out and "| drafts    | verify 3 rows" in out
    rc, _, err = _run(capsys, argv[:8] + ["--op-profile"])
    assert rc == 2 and "--op-profile needs --spec-n-max" in err


def test_speculative_rows_on_text_prompts(capsys, tiny_q8, tmp_path, monkeypatch):
    """--spec-prompts: each file's first D tokens are a prompt; a row adds up the prompts' rounds."""
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    files[0].write_text("def add(a, b):\n    return a + b\n" * 4)
    files[1].write_text("import os\nfor name in os.listdir('.'):\n    print(name)\n" * 3)
    calls = []
    original = bench.OursRunner.spec_decode

    def recording(self, prompt, n_gen, n_max, *rest):
        out = original(self, prompt, n_gen, n_max, *rest)
        calls.append((list(prompt), n_max, out))
        return out
    monkeypatch.setattr(bench.OursRunner, "spec_decode", recording)
    argv = ["-m", str(tiny_q8), "-p", "0", "-n", "5", "-d", "12", "-r", "1", "--no-warmup", "-t", "2",
            "--spec-n-max", "3", "--spec-prompts", *map(str, files), "-o", "json"]
    rc, out, err = _run(capsys, argv)
    assert rc == 0, err
    [row] = json.loads(out)["spec_rows"]
    assert row["test"] == "tg5 @ d12 mtp3 x 2 prompts" and row["n_prompts"] == 2

    from glm5next_runtime import Model
    ids = [Model(tiny_q8).tokenize(f.read_text(), parse_special=False)[:12] for f in files]
    # back-to-back pairs, the first plain decoding first, the next drafting first (the order alternates)
    assert [(p, n) for p, n, _ in calls] == [(ids[0], 0), (ids[0], 3), (ids[1], 3), (ids[1], 0)]
    spec = [stats for _, n, (_, _, stats) in calls if n == 3]
    drafted = [a + b for a, b in zip(spec[0]["drafted_at"], spec[1]["drafted_at"])]
    accepted = [a + b for a, b in zip(spec[0]["accepted_at"], spec[1]["accepted_at"])]
    assert row["acceptance_per_position"] == pytest.approx([a / d for a, d in zip(accepted, drafted)])
    rounds = spec[0]["n_drafts"] + spec[1]["n_drafts"]
    assert row["mean_accepted_length"] == pytest.approx((sum(accepted) + rounds) / rounds)
    for timing in (row["spec"], row["no_spec"]):  # one repetition: 2 prompts x 5 tokens
        assert timing["tps_samples"][0] * timing["seconds"][0] == pytest.approx(10)


@pytest.mark.parametrize("extra, message", [
    (["--spec-n-max", "2", "-d", "0"], "give depths >= 1"),
    (["-d", "8"], "needs --spec-n-max"),
    (["--spec-n-max", "2", "-d", "400"], "fewer than -d 400"),
])
def test_spec_prompts_errors(capsys, tiny_q8, tmp_path, extra, message):
    prompt = tmp_path / "p.py"
    prompt.write_text("x = 1\n" * 20)
    rc, _, err = _run(capsys, ["-m", str(tiny_q8), "-p", "0", "-n", "2", "-r", "1", "--spec-prompts", str(prompt),
                               *extra])
    assert rc == 2 and message in err


def test_spec_prompts_unreadable(capsys, tiny_q8, tmp_path):
    rc, _, err = _run(capsys, ["-m", str(tiny_q8), "-p", "0", "-n", "2", "-d", "4", "--spec-n-max", "2",
                               "--spec-prompts", str(tmp_path / "missing.py")])
    assert rc == 2 and "cannot read" in err and "missing.py" in err


def test_placement_over_rpc_reports_what_crosses_devices(capsys, tiny_q8, rpc_servers):
    """-ngl over an RPC device: the rows run placed, and the report says where, in how many graph splits, and how
    many bytes the scheduler copied between devices in how much time."""
    endpoint, _ = rpc_servers.get("bench")
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-p", "16", "-n", "4", "-r", "1", "-t", "1", "-b", "8",
                                 "--rpc", endpoint, "-ngl", "99", "-o", "json"])
    assert rc == 0, err
    info = json.loads(out)["model"]
    assert info["backend"].startswith("CPU,RPC")
    traffic = info["traffic"]
    assert all(traffic[k]["splits"] > 1 for k in ("decode", "verify4", "prefill"))
    # a decode token's embedding row (the input layer stays on the CPU, as in llama.cpp) crosses to the device
    from glm5next_runtime import Model
    assert traffic["decode"]["bytes_copied"] >= 4 * Model(tiny_q8).hparams["n_embd"]
    assert traffic["verify4"]["bytes_copied"] > traffic["decode"]["bytes_copied"]
    assert all(traffic[k]["copy_seconds"] > 0 for k in traffic)


def test_cpu_only_run_copies_nothing(capsys, tiny_q8):
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-p", "8", "-n", "2", "-r", "1", "-t", "1", "-o", "json"])
    assert rc == 0, err
    traffic = json.loads(out)["model"]["traffic"]
    assert all(t["splits"] == 1 and t["bytes_copied"] == 0 for t in traffic.values())


def test_placement_with_llama_cpp_is_refused(capsys, tiny_q8):
    rc, _, err = _run(capsys, ["-m", str(tiny_q8), *SMALL, "-ngl", "99", "--llama-cpp"])
    assert rc == 2 and "--llama-cpp runs llama-cpp-python on the CPU" in err


def test_batched_table_has_a_row_per_engine_and_sequence_count(capsys, tiny_q8):
    """-npl: llama-batched-bench's table, glm5next's rows (plain and each --spec-n-max) and llama.cpp's."""
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-npl", "1,3", "-npp", "12", "-ntg", "5", "-r", "1", "-t", "2",
                                 "-b", "8", "--llama-cpp", "--spec-n-max", "2", "-o", "json"])
    assert rc == 0, err
    rows = json.loads(out)
    assert [(r["engine"], r["b"]) for r in rows] == [(e, b) for b in (1, 3)
                                                    for e in ("glm5next", "glm5next mtp2", "llama.cpp")]
    assert all(r["pp"] == 12 and r["tg"] == 5 and r["s_pp"] > 0 and r["s_tg"] > 0 for r in rows)
    assert {r["backend"] for r in rows} == {"CPU"}


def test_batched_table_runs_placed(capsys, tiny_q8, rpc_servers):
    """-npl with -ngl over an RPC device: glm5next's sequences run on the placed model (the rows say where), and
    llama.cpp's side takes -ngl as its n_gpu_layers (this CPU-only build of llama-cpp-python keeps it on the CPU)."""
    endpoint, _ = rpc_servers.get("bench")
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-npl", "1,2", "-npp", "12", "-ntg", "4", "-r", "1", "-t", "1",
                                 "-b", "8", "--rpc", endpoint, "-ngl", "99", "-o", "json"])
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["b"] for r in rows] == [1, 2] and all(r["s_tg"] > 0 for r in rows)
    assert all(r["backend"].startswith("CPU,RPC") for r in rows)
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-npl", "1", "-npp", "12", "-ntg", "4", "-r", "1", "-t", "1",
                                 "-b", "8", "-ngl", "99", "--llama-cpp", "-o", "json"])
    assert rc == 0, err
    assert [r["backend"] for r in json.loads(out) if r["engine"] == "llama.cpp"] == ["CPU"]


@pytest.mark.parametrize("flag", [["--rpc", "127.0.0.1:1"], ["--cpu-moe"], ["-ot", "exps=CPU"]])
def test_batched_llama_cpp_refuses_what_it_cannot_place(capsys, tiny_q8, flag):
    rc, _, err = _run(capsys, ["-m", str(tiny_q8), "-npl", "1", "--llama-cpp", "-ngl", "99", *flag])
    assert rc == 2 and "--rpc, --cpu-moe and -ot have no counterpart there" in err


def test_batched_census_counts_the_graphs_of_the_run(capsys, tiny_q8):
    """-npl --census: after the table, glm5next's graph census by graph kind (runtime/graph_census.h): in JSON beside
    the rows, in markdown as a second table; a CPU-only run's graphs run on the CPU alone and read no device memory.
    Without -npl it is refused."""
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-npl", "1,2", "-npp", "12", "-ntg", "3", "-r", "1", "-t", "1",
                                 "-b", "8", "--census", "-o", "json"])
    assert rc == 0, err
    report = json.loads(out)
    assert [r["b"] for r in report["rows"]] == [1, 2]
    census = report["census"]
    assert {"decode 1 row", "decode 2 rows x 2 sequences"} <= set(census)
    for kind, c in census.items():
        assert c["by_device"] == {"CPU": c["nodes"]} and c["splits"] == 1 and c["readbacks"] == 0, kind
        assert c["products"] > 0 and c["cuda_graph_blockers"] == 0, kind
    assert census["decode 2 rows x 2 sequences"]["parts"] == 2
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-npl", "1", "-npp", "12", "-ntg", "2", "-r", "1", "-t", "1",
                                 "-b", "8", "--census"])
    assert rc == 0, err
    assert "| graph | nodes | by device |" in out and "| decode 1 row |" in out
    rc, _, err = _run(capsys, ["-m", str(tiny_q8), *SMALL, "--census"])
    assert rc == 2 and "--census takes the census of -npl's graphs" in err


def test_batched_draft_rows_take_a_synthetic_acceptance(capsys, tiny_q8):
    """-npl --spec-accept L: the draft-MTP rows' rounds accept L - 1 drafts on average whatever the target says (as
    the llama-bench draft-MTP rows do), their engine names say so, and each row reports the mean accepted length its
    runs had: 3 for 2 drafts all accepted. Without it the random file's drafts are rejected."""
    args = ["-m", str(tiny_q8), "-npl", "1,2", "-npp", "12", "-ntg", "6", "-r", "1", "-t", "1", "-b", "8",
            "--spec-n-max", "2", "-o", "json"]
    rc, out, err = _run(capsys, [*args, "--spec-accept", "3"])
    assert rc == 0, err
    rows = [r for r in json.loads(out) if "mtp" in r["engine"]]
    assert [(r["engine"], r["b"]) for r in rows] == [("glm5next mtp2 @3", 1), ("glm5next mtp2 @3", 2)]
    assert all(r["accepted_len"] == 3.0 for r in rows)
    rc, out, err = _run(capsys, args)
    assert rc == 0, err
    assert all(r["accepted_len"] < 3.0 for r in json.loads(out) if "mtp" in r["engine"])
    rc, _, err = _run(capsys, [*args, "--spec-accept", "0.5"])
    assert rc == 2 and "a mean accepted length per round is >= 1" in err


# ------------------------------------------------------------------------------------------------ --override-kv

TOP_K = "glm5next.attention.indexer.top_k=int:8"  # the tiny preset's file says 16


@pytest.fixture(scope="module")
def tiny_f32(checkpoints):
    return checkpoints.convert(checkpoints.make("bench-tiny-f32", "tiny", dtype="f32"), outtype="f32",
                               arch="glm5-next")


def test_override_kv_changes_the_selections_and_llama_cpp_gets_the_same_value(tiny_f32):
    """Both engines of a row load with the override (the key spelled as the file's architecture for llama.cpp): on
    an f32 file with f32 caches their logits agree past top-k rows with it, as without it, and the override moves
    them (so llama.cpp did not ignore it); glm5next's rows then select 8 keys and the tail."""
    tokens = [(7 * i + 3) % 200 for i in range(64)]  # 4x the file's top-k: the indexer drops keys
    logits, sizes = {}, {}
    for override in ([], [TOP_K]):
        ours = bench.OursRunner(tiny_f32, 128, 2, 64, cache_type_k="f32", override_kv=override)
        upstream = bench.LlamaCppRunner(tiny_f32, 128, 2, 64, cache_type_k="f32",
                                        kv_overrides=bench.runners.llama_kv_overrides(ours.model.kv_overrides))
        ours.eval(tokens)
        upstream.eval(tokens)
        got = np.ctypeslib.as_array(upstream.llm._ctx.get_logits(), shape=(upstream._n_vocab,)).copy()
        logits[bool(override)] = (ours._logits.copy(), got)
        layer = ours.model.dsa_layers[0]
        sizes[bool(override)] = max(len(s) for s in ours.model.selected_positions(layer))
        upstream.llm.close()
    assert sizes == {False: 16 + 3, True: 8 + 3}  # top-k keys, plus the tail's (kpool_select_tail, kpool 4)
    for ours_logits, llama_logits in logits.values():
        assert np.abs(ours_logits - llama_logits).max() < 1e-4
    assert np.abs(logits[True][1] - logits[False][1]).max() > 1e-2
    assert bench.runners.llama_kv_overrides([("glm5-next.attention.indexer.top_k", "int", "8"), ("a", "bool", "true"),
                                             ("b", "float", "0.5"), ("c", "str", "x")]) == {
        "glm5-next.attention.indexer.top_k": 8, "a": True, "b": 0.5, "c": "x"}


def test_batched_llama_cpp_takes_the_override_too(tiny_f32):
    """-npl's llama.cpp (its low-level API: the overrides as llama.cpp's C array) gives the high-level API's logits
    with the same override."""
    from glm5next_runtime.bench.batched import LlamaCppBatched
    tokens = [(5 * i + 1) % 200 for i in range(64)]
    overrides = {"glm5-next.attention.indexer.top_k": 8}
    want = {}
    for o in ({}, overrides):
        upstream = bench.LlamaCppRunner(tiny_f32, 128, 2, 64, cache_type_k="f32", kv_overrides=o)
        upstream.eval(tokens)
        want[bool(o)] = np.ctypeslib.as_array(upstream.llm._ctx.get_logits(), shape=(upstream._n_vocab,)).copy()
        upstream.llm.close()
    batched = LlamaCppBatched(tiny_f32, 128, 2, 64, 1, cache_type_k="f32", kv_overrides=overrides)
    batched._decode([(t, pos, 0, pos == len(tokens) - 1) for pos, t in enumerate(tokens)])
    got = np.ctypeslib.as_array(batched.L.llama_get_logits_ith(batched.ctx, -1), shape=(batched.n_vocab,))
    # 4.7e-4 measured: the low-level context's flash attention is llama.cpp's default (auto: on for the CPU), the
    # high-level API's off; the override itself moves these logits by 1.7
    assert np.abs(got - want[True]).max() < 2e-3 and np.abs(got - want[False]).max() > 0.1


def test_bench_takes_override_kv_for_both_engines_and_reports_it(capsys, tiny_q8):
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-p", "16", "-n", "2", "-r", "1", "-t", "2", "-b", "16",
                                 "--llama-cpp", "--override-kv", TOP_K, "-o", "json"])
    assert rc == 0, err
    info = json.loads(out)["model"]
    assert info["indexer_top_k"] == 8 and info["kv_overrides"] == ["glm5-next.attention.indexer.top_k=int:8"]
    rc, out, err = _run(capsys, ["-m", str(tiny_q8), "-npl", "1", "-npp", "8", "-ntg", "2", "-r", "1", "-t", "2",
                                 "--llama-cpp", "--override-kv", TOP_K, "-o", "json"])
    assert rc == 0, err


@pytest.mark.parametrize("override,message", [
    ("glm5next.attention.indexer.topk=int:8", "did you mean glm5-next.attention.indexer.top_k?"),
    ("glm5next.attention.indexer.top_k=str:8", "stored as u32, not as str"),
    ("glm5next.attention.indexer.top_k=int:0", "glm5-next.attention.indexer.top_k"),
    ("glm5next.attention.indexer.top_k=int:6", "divide glm5-next.attention.indexer.top_k = 6"),
])
def test_bench_refuses_a_bad_override_naming_the_key(capsys, tiny_q8, override, message):
    """One parser and one set of errors: glm5next's loader's, before either engine runs a row."""
    for extra in ([], ["-npl", "1"]):
        rc, _, err = _run(capsys, ["-m", str(tiny_q8), "-p", "8", "-n", "1", "-r", "1", *extra, "--llama-cpp",
                                   "--override-kv", override])
        assert rc == 2 and message in err, err
