"""Model loading (csrc/model/model.cpp): both arch spellings, hyper-parameters equal to the metadata, --override-kv
applied before any check, key aliases, memory-mapped weights, and a clear ValueError naming the culprit for
every malformed file (run in a subprocess, so that a crash shows up as a failed test, not a dead session)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGUFValueType as VT

from conftest import new_sequence, random_tokens

from glm5next_runtime import _core

ARCH_KEYS = {  # hparams field -> metadata key without the arch prefix
    "n_vocab": "vocab_size", "n_embd": "embedding_length", "n_ff": "feed_forward_length",
    "n_ctx_train": "context_length", "n_layer_all": "block_count", "n_nextn": "nextn_predict_layers",
    "n_head": "attention.head_count", "head_count_kv": "attention.head_count_kv",
    "rms_eps": "attention.layer_norm_rms_epsilon", "ln_eps": "attention.layer_norm_epsilon",
    "q_lora_rank": "attention.q_lora_rank", "kv_lora_rank": "attention.kv_lora_rank",
    "head_k_mla": "attention.key_length_mla", "head_v_mla": "attention.value_length_mla",
    "idx_n_head": "attention.indexer.head_count", "idx_head_dim": "attention.indexer.key_length",
    "idx_top_k": "attention.indexer.top_k", "idx_kpool": "attention.indexer.kpool",
    "idx_select_tail": "attention.indexer.kpool_select_tail", "idx_full": "attention.indexer.types",
    "index_share_mtp": "index_share_for_mtp_iteration", "n_dense_lead": "leading_dense_block_count",
    "n_expert": "expert_count", "n_expert_used": "expert_used_count", "n_expert_shared": "expert_shared_count",
    "n_expert_groups": "expert_group_count", "n_group_used": "expert_group_used_count",
    "n_ff_exp": "expert_feed_forward_length", "expert_weights_scale": "expert_weights_scale",
    "expert_weights_norm": "expert_weights_norm", "swiglu_clamp_exp": "swiglu_clamp_exp",
    "swiglu_clamp_shexp": "swiglu_clamp_shexp", "ssm_conv_kernel": "ssm.conv_kernel",
    "kda_head_dim": "kda.head_dim", "kda_lower_bound": "kda.gate_lower_bound", "hc_mult": "hyper_connection.count",
    "hc_sinkhorn_iters": "hyper_connection.sinkhorn_iterations", "hc_eps": "hyper_connection.epsilon",
}


@pytest.fixture(scope="module")
def ckpt(checkpoints):
    return checkpoints.make("load-tiny", dtype="f32")


@pytest.fixture(scope="module")
def tiny(checkpoints, ckpt) -> Path:
    return checkpoints.convert(ckpt, outtype="f32")


@pytest.fixture(scope="module")
def tiny_dash(checkpoints, ckpt) -> Path:
    return checkpoints.convert(ckpt, tag="-dash", outtype="f32", arch="glm5-next")


def rewrite(src: Path, dst: Path, *, arch: str | None = None, drop_keys=(), rename_keys=None, set_keys=None,
            drop_tensors=(), reshape=None) -> Path:
    """Copy GGUF `src` to `dst` with changes: set_keys {key: (GGUFValueType, value[, array element type])};
    reshape {tensor: numpy shape}. Only for files whose tensors are all F32 (the data is rewritten as float32 arrays)."""
    rename_keys, set_keys, reshape = rename_keys or {}, set_keys or {}, reshape or {}
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch=arch or r.get_field("general.architecture").contents())
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name in drop_keys:
            continue
        sub = f.types[-1] if f.types[0] == VT.ARRAY else None
        w.add_key_value(rename_keys.get(f.name, f.name), f.contents(), f.types[0], sub_type=sub)
    for key, (vtype, value, *sub) in set_keys.items():
        w.kv_data[0].pop(key, None)
        w.add_key_value(key, value, vtype, sub_type=sub[0] if sub else None)
    for t in r.tensors:
        if t.name not in drop_tensors:
            data = np.asarray(t.data)
            w.add_tensor(t.name, data.reshape(reshape[t.name]) if t.name in reshape else data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


# ------------------------------------------------------------------------------------------- good files

@pytest.mark.parametrize("spelling", ["glm5next", "glm5-next"])
def test_hparams_equal_metadata(tiny, tiny_dash, spelling):
    path = tiny if spelling == "glm5next" else tiny_dash
    m = _core.Model(str(path))
    hp = m.hparams
    assert m.arch == hp["arch"] == spelling and m.path == str(path) and m.n_vocab == hp["n_vocab"]
    meta = {f.name: f.contents() for f in gguf.GGUFReader(path).fields.values()}
    for field, key in ARCH_KEYS.items():
        assert hp[field] == pytest.approx(meta[f"{spelling}.{key}"], rel=1e-7), field
        assert m.metadata(f"{spelling}.{key}") == pytest.approx(hp[field], rel=1e-7), key
    assert hp["has_kda_lower_bound"] and hp["n_trunk"] == hp["n_layer_all"] - hp["n_nextn"]
    assert m.metadata("glm5next.block_count") == m.metadata("glm5-next.block_count")  # either prefix works
    assert m.chat_template == meta["tokenizer.chat_template"]
    with pytest.raises(KeyError):
        m.metadata("glm5next.no_such_key")


def test_tensors_are_the_files_and_mapped_at_their_offsets(tiny):
    m = _core.Model(str(tiny))
    r = gguf.GGUFReader(tiny)
    listed = m.tensors()
    assert [t[0] for t in listed] == [t.name for t in r.tensors]
    for (name, type_name, shape, nbytes), t in zip(listed, r.tensors):
        stored = [int(d) for d in t.shape]
        while len(stored) > 1 and stored[-1] == 1:  # ggml shapes drop trailing 1s (ssm_conv1d is {K, 1, C, 1})
            stored.pop()
        assert (type_name, shape, nbytes) == (t.tensor_type.name.lower(), stored, t.n_bytes)
        data = m.tensor_data(name)
        assert not data.flags.writeable and data.tobytes() == np.asarray(t.data).tobytes(), name
    with pytest.raises(KeyError):
        m.tensor_data("nope.weight")


def test_vocab_matches_metadata(tiny):
    m = _core.Model(str(tiny))
    tokens, types, merges, special = m.vocab()
    assert tokens == m.metadata("tokenizer.ggml.tokens") and types == m.metadata("tokenizer.ggml.token_type")
    assert merges == m.metadata("tokenizer.ggml.merges")
    assert special["bos"] == m.metadata("tokenizer.ggml.bos_token_id") and tokens[special["bos"]] == "[gMASK]"
    assert {"bos", "eos", "eot", "eom", "unk", "pad"} <= special.keys()


@pytest.mark.parametrize("preset,options", [
    ("shared", {}),                     # a "shared" DSA layer: no indexer tensors
    ("dense-sparse", {}),               # two leading dense layers
    ("tiny", {"layout": "no-mtp"}),     # trunk only
    ("tiny", {"layout": "mtp-only"}),   # draft only
    ("tiny", {"outtype": "q8_0"}),      # quantized weights
])
def test_layouts_and_layer_kinds_load(checkpoints, preset, options):
    ckpt = checkpoints.make(f"load-{preset}", preset, dtype="f32")
    tag = "-" + options.get("layout", "combined")
    m = _core.Model(str(checkpoints.convert(ckpt, tag=tag, **{"outtype": "f32", **options})))
    hp = m.hparams
    assert m.draft_only == (options.get("layout") == "mtp-only")
    assert hp["n_nextn"] == (0 if options.get("layout") == "no-mtp" else 1)
    names = {t[0] for t in m.tensors()}
    if preset == "shared":
        assert hp["idx_full"] == [True, True, False, True, True]
        assert "blk.2.indexer.proj.weight" not in names and "blk.1.indexer.proj.weight" in names
    if preset == "dense-sparse":
        assert hp["n_dense_lead"] == 2 and "blk.1.ffn_up.weight" in names and "blk.2.ffn_up_exps.weight" in names


def test_conv_weights_may_be_3d(tiny, tmp_path):
    """llama.cpp accepts ssm_conv1d_* as {K, 1, C} as well as {K, 1, C, 1}."""
    convs = [t for t in gguf.GGUFReader(tiny).tensors if ".ssm_conv1d_" in t.name]
    f = rewrite(tiny, tmp_path / "conv3d.gguf", reshape={t.name: t.data.shape[1:] for t in convs})
    m = _core.Model(str(f))
    assert {tuple(s) for n, _, s, _ in m.tensors() if ".ssm_conv1d_" in n} == {(4, 1, 64)}
    assert len(convs) == 6 and {len(t.shape) for t in gguf.GGUFReader(f).tensors if ".ssm_conv1d_" in t.name} == {3}


# --------------------------------------------------------------------------------------------- overrides

def test_override_either_prefix_int_float_bool_str(tiny, tiny_dash):
    m = _core.Model(str(tiny_dash), ["glm5next.attention.indexer.top_k=int:32",
                                     "glm5-next.attention.layer_norm_rms_epsilon=float:0.001",
                                     "glm5next.attention.indexer.kpool_select_tail=bool:false",
                                     "general.name=str:renamed", "custom.note=str:a=b:c"])
    hp = m.hparams
    assert hp["idx_top_k"] == 32 and m.metadata("glm5-next.attention.indexer.top_k") == 32
    # stays f32: the stored value is the float32 nearest to 0.001, not the double
    assert m.metadata("glm5next.attention.layer_norm_rms_epsilon") == float(np.float32(0.001)) == hp["rms_eps"]
    assert hp["idx_select_tail"] is False
    assert m.metadata("general.name") == "renamed" and m.metadata("custom.note") == "a=b:c"
    assert m.kv_overrides == [("glm5-next.attention.indexer.top_k", "int", "32"),
                              ("glm5-next.attention.layer_norm_rms_epsilon", "float", "0.001"),
                              ("glm5-next.attention.indexer.kpool_select_tail", "bool", "false"),
                              ("general.name", "str", "renamed"), ("custom.note", "str", "a=b:c")]
    assert _core.Model(str(tiny), ["glm5-next.attention.indexer.top_k=int:8"]).hparams["idx_top_k"] == 8


def test_override_is_applied_before_the_checks(tiny, tmp_path):
    bad = rewrite(tiny, tmp_path / "kpool1.gguf", set_keys={"glm5next.attention.indexer.kpool": (VT.UINT32, 1)})
    with pytest.raises(ValueError, match=r"glm5next\.attention\.indexer\.kpool"):
        _core.Model(str(bad))
    assert _core.Model(str(bad), ["glm5next.attention.indexer.kpool=int:4"]).hparams["idx_kpool"] == 4
    with pytest.raises(ValueError, match=r"kpool.*3.*top_k = 16"):
        _core.Model(str(tiny), ["glm5-next.attention.indexer.kpool=int:3"])


def test_override_value_may_list_several_as_llama_cpp(tiny):
    m = _core.Model(str(tiny), ["general.name=str:renamed,glm5next.expert_used_count=int:1"])
    assert m.metadata("general.name") == "renamed" and m.hparams["n_expert_used"] == 1
    # a comma not followed by KEY=TYPE: belongs to the str value (llama.cpp would split there)
    m = _core.Model(str(tiny), ["general.name=str:a, b,c=d,custom.note=str:x,y"])
    assert m.metadata("general.name") == "a, b,c=d" and m.metadata("custom.note") == "x,y"
    with pytest.raises(ValueError, match="glm5next.block_count=int:five"):
        _core.Model(str(tiny), ["general.name=str:x,glm5next.block_count=int:five"])


def test_an_override_of_a_key_nothing_reads_is_refused_naming_the_nearest(tiny, tmp_path):
    """A misspelt key of the architecture's namespace would change nothing (llama.cpp ignores it silently)."""
    with pytest.raises(ValueError, match=r"--override-kv glm5next\.attention\.indexer\.topk=int:64: the file has no "
                                         r"key glm5next\.attention\.indexer\.topk .*did you mean "
                                         r"glm5next\.attention\.indexer\.top_k\?"):
        _core.Model(str(tiny), ["glm5-next.attention.indexer.topk=int:64"])
    with pytest.raises(ValueError, match=r"glm5next\.wholly\.unknown=int:1: .*change nothing\)?$"):
        _core.Model(str(tiny), ["glm5next.wholly.unknown=int:1"])
    # a key the loader looks up though the file lacks it (an optional one) is taken
    lacking = rewrite(tiny, tmp_path / "no-ctx.gguf", drop_keys=["glm5next.context_length"])
    assert _core.Model(str(lacking)).hparams["n_ctx_train"] == 0
    assert _core.Model(str(lacking), ["glm5next.context_length=int:4096"]).hparams["n_ctx_train"] == 4096
    with pytest.raises(ValueError, match="topk"):  # the same rule where only the hyper-parameters are read
        _core.read_hparams(str(tiny), ["glm5next.attention.indexer.topk=int:64"])


@pytest.mark.parametrize("spec,message", [
    ("glm5next.block_count", "expected KEY=TYPE:VALUE"),
    ("glm5next.block_count=5", "expected KEY=TYPE:VALUE"),
    ("=int:5", "empty KEY"),
    ("glm5next.block_count=integer:5", "unknown TYPE 'integer'"),
    ("glm5next.block_count=int:five", "'five' is not a 64-bit integer"),
    ("glm5next.hc_eps=float:1e-3x", "is not a number"),
    ("glm5next.expert_weights_norm=bool:yes", "is not a bool"),
    ("glm5next.block_count=int:-1", "does not fit the key's stored type"),       # u32 stays u32
    ("glm5next.block_count=int:4294967296", "does not fit the key's stored type"),
    ("glm5next.block_count=float:5", "stored as u32, not as float"),
    ("general.name=int:5", "stored as str, not as int"),
    ("glm5next.attention.head_count_kv=int:1", "arrays cannot be overridden"),
    ("general.alignment=int:64", "general.alignment cannot be overridden"),
])
def test_bad_override_names_it(tiny, spec, message):
    with pytest.raises(ValueError, match="--override-kv") as e:
        _core.Model(str(tiny), [spec])
    assert message in str(e.value) and spec.split("=")[0] in str(e.value)


# ------------------------------------------------------------------------------------------------ aliases

def test_alias_keys_are_read(tiny, tmp_path):
    p = "glm5next."
    f = rewrite(tiny, tmp_path / "alias.gguf",
                rename_keys={p + "attention.indexer.kpool": p + "attention.indexer.block_size",
                             p + "index_share_for_mtp_iteration": p + "attention.indexer.index_share_mtp"},
                drop_keys=[p + "kda.gate_lower_bound", p + "swiglu_clamp_shexp", p + "attention.indexer.types"],
                set_keys={p + "swiglu_clamp_exp": (VT.FLOAT32, 3.0)})
    hp = _core.Model(str(f)).hparams
    assert hp["idx_kpool"] == 4 and hp["index_share_mtp"] is True
    assert hp["has_kda_lower_bound"] is False
    assert hp["swiglu_clamp_exp"] == hp["swiglu_clamp_shexp"] == [3.0] * hp["n_layer_all"]  # scalar form
    assert hp["idx_full"] == [True] * hp["n_trunk"]  # absent types: all full
    # the kpool alias goes through the same check, and overrides reach it under its own name
    with pytest.raises(ValueError, match="block_size"):
        _core.Model(str(f), [p + "attention.indexer.block_size=int:3"])

    g = rewrite(tiny, tmp_path / "alias2.gguf",
                rename_keys={p + "index_share_for_mtp_iteration": p + "attention.indexer.share_for_mtp_iteration"})
    assert _core.Model(str(g)).hparams["index_share_mtp"] is True
    h = rewrite(tiny, tmp_path / "noshare.gguf", drop_keys=[p + "index_share_for_mtp_iteration"])
    assert _core.Model(str(h)).hparams["index_share_mtp"] is False


# ------------------------------------------------------------------------------------------ malformed files

PROBE = textwrap.dedent("""
    import json, sys
    from glm5next_runtime import _core
    for path, overrides in json.loads(sys.argv[1]):
        try:
            _core.Model(path, overrides)
            print(json.dumps({"error": None}), flush=True)
        except Exception as e:
            print(json.dumps({"error": type(e).__name__, "is_value_error": isinstance(e, ValueError),
                              "message": str(e)}), flush=True)
""")


def _malformed_cases(tiny: Path, d: Path) -> dict[str, tuple[Path, list[str], list[str]]]:
    """case -> (path, overrides, substrings the message must contain)."""
    p = "glm5next."
    r = gguf.GGUFReader(tiny)
    size = tiny.stat().st_size
    cut = size - 1000
    first_cut = next(t.name for t in r.tensors if t.data_offset + t.n_bytes > cut)
    (d / "text.gguf").write_text("this is not a model\n")
    (d / "empty.gguf").write_bytes(b"")
    data = tiny.read_bytes()
    (d / "cut-data.gguf").write_bytes(data[:cut])
    (d / "cut-header.gguf").write_bytes(data[:200])
    # a header claiming 2**40 tensors: the reader must fail, not allocate or crash
    (d / "bad-count.gguf").write_bytes(data[:8] + (2**40).to_bytes(8, "little") + data[16:])
    fifo = d / "fifo.gguf"  # opening it for reading would block until someone writes
    os.mkfifo(fifo)

    def edit(name: str, **changes) -> Path:
        return rewrite(tiny, d / f"{name}.gguf", **changes)

    q_a = "blk.1.attn_q_a.weight"  # ggml {64, 32}
    return {
        "nonexistent": (d / "missing.gguf", [], ["missing.gguf", "no such file"]),
        "directory": (d, [], ["not a regular file"]),
        "not-gguf": (d / "text.gguf", [], ["text.gguf", "not a GGUF file"]),
        "empty": (d / "empty.gguf", [], ["not a GGUF file"]),
        "cut-in-data": (d / "cut-data.gguf", [], ["cut-data.gguf", "truncated", first_cut]),
        "cut-in-header": (d / "cut-header.gguf", [], ["cut-header.gguf", "not a readable GGUF file"]),
        "bad-tensor-count": (d / "bad-count.gguf", [], ["not a readable GGUF file"]),
        "wrong-arch": (edit("llama", arch="llama"), [], ["expected 'glm5next' or 'glm5-next', found 'llama'"]),
        "missing-tensor": (edit("no-qa", drop_tensors=[q_a]), [], [q_a, "missing", "DSA layer 1"]),
        "mis-shaped-tensor": (edit("qa-shape", reshape={q_a: (64, 32)}), [],
                              [q_a, "has shape [32, 64]", "expected [64, 32]"]),
        "nextn-ge-block-count": (edit("nextn5", set_keys={p + "nextn_predict_layers": (VT.UINT32, 5)}), [],
                                 [p + "nextn_predict_layers", "is 5", "block_count = 5"]),
        "kpool-1": (edit("kpool1", set_keys={p + "attention.indexer.kpool": (VT.UINT32, 1)}), [],
                    [p + "attention.indexer.kpool", "is 1"]),
        "kpool-not-dividing": (edit("kpool3", set_keys={p + "attention.indexer.kpool": (VT.UINT32, 3)}), [],
                               [p + "attention.indexer.kpool", "is 3", "top_k = 16"]),
        "missing-key": (edit("no-qlora", drop_keys=[p + "attention.q_lora_rank"]), [],
                        [p + "attention.q_lora_rank", "missing"]),
        "missing-kpool": (edit("no-kpool", drop_keys=[p + "attention.indexer.kpool"]), [],
                          [p + "attention.indexer.kpool", "missing"]),
        "wrong-key-type": (edit("str-blocks", set_keys={p + "block_count": (VT.STRING, "five")}), [],
                           [p + "block_count", "stored as str"]),
        "head-count-kv-length": (edit("hkv", set_keys={p + "attention.head_count_kv": (VT.ARRAY, [0, 1, 1], VT.INT32)}), [],
                                 [p + "attention.head_count_kv", "has 3 entries", "block_count = 5"]),
        "hc-count": (tiny, [p + "hyper_connection.count=int:2"], [p + "hyper_connection.count", "only 4"]),
        "nextn-via-override": (tiny, [p + "nextn_predict_layers=int:7"], [p + "nextn_predict_layers", "is 7"]),
        # values that used to load and then abort in ggml on the first token
        "rms-eps-nan": (edit("eps-nan", set_keys={p + "attention.layer_norm_rms_epsilon": (VT.FLOAT32, float("nan"))}),
                        [], [p + "attention.layer_norm_rms_epsilon", "is nan", "(0, 1]"]),
        "rms-eps-negative": (tiny, [p + "attention.layer_norm_rms_epsilon=float:-1"],
                             [p + "attention.layer_norm_rms_epsilon", "is -1"]),
        "sinkhorn-2^31": (tiny, [p + "hyper_connection.sinkhorn_iterations=int:2147483648"],
                          [p + "hyper_connection.sinkhorn_iterations", "2147483648", "[1, 1000]"]),
        "clamp-negative": (edit("clamp", set_keys={p + "swiglu_clamp_exp": (VT.FLOAT32, -1.0)}), [],
                           [p + "swiglu_clamp_exp", "is -1"]),
        "fifo": (fifo, [], ["fifo.gguf", "not a regular file"]),
    }


@pytest.fixture(scope="module")
def malformed(tiny, tmp_path_factory):
    """Loads every malformed case in ONE subprocess; -> {case: result dict}. A crash fails every case after it."""
    d = tmp_path_factory.mktemp("malformed")
    cases = _malformed_cases(tiny, d)
    assert list(cases) == MALFORMED
    arg = json.dumps([[str(path), ov] for path, ov, _ in cases.values()])
    r = subprocess.run([sys.executable, "-c", PROBE, arg], capture_output=True, text=True, timeout=120)
    results = [json.loads(line) for line in r.stdout.splitlines()]
    crash = f"loader process ended with rc {r.returncode} after {len(results)} cases:\n{r.stderr[-2000:]}"
    return {name: (results[i] if i < len(results) else {"crash": crash}, cases[name][2])
            for i, name in enumerate(cases)}


MALFORMED = ["nonexistent", "directory", "not-gguf", "empty", "cut-in-data", "cut-in-header", "bad-tensor-count",
             "wrong-arch", "missing-tensor", "mis-shaped-tensor", "nextn-ge-block-count", "kpool-1",
             "kpool-not-dividing", "missing-key", "missing-kpool", "wrong-key-type", "head-count-kv-length",
             "hc-count", "nextn-via-override", "rms-eps-nan", "rms-eps-negative", "sinkhorn-2^31", "clamp-negative",
             "fifo"]


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_file_raises_value_error_naming_the_culprit(malformed, case):
    result, expected = malformed[case]
    assert "crash" not in result, result.get("crash")
    assert result["error"] is not None, "loaded without error"
    assert result["is_value_error"], result
    for part in expected:
        assert part in result["message"], (part, result["message"])


# ------------------------------------------------------------------------------------------------ memory

RSS_PROBE = textwrap.dedent("""
    import sys
    import numpy as np
    from glm5next_runtime import _core

    def rss(kind):
        for line in open("/proc/self/status"):
            if line.startswith(kind):
                return int(line.split()[1]) * 1024

    anon0, file0 = rss("RssAnon"), rss("RssFile")
    m = _core.Model(sys.argv[1])
    anon1 = rss("RssAnon")
    touched = 0
    for name, *_ in m.tensors():  # read every weight: its pages must come in as file pages, not copies
        touched += int(m.tensor_data(name)[::4096].sum() >= 0)
    print(anon1 - anon0, rss("RssAnon") - anon0, rss("RssFile") - file0)
""")


@pytest.mark.slow
def test_weights_are_mapped_not_copied(checkpoints):
    path = checkpoints.convert(checkpoints.make("many-experts", "many-experts"), outtype="f32")
    size = path.stat().st_size
    r = subprocess.run([sys.executable, "-c", RSS_PROBE, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    anon_load, anon_touched, file_touched = map(int, r.stdout.split())
    assert size > 500 * 2**20
    assert anon_load < size / 20, f"anonymous memory grew by {anon_load / 2**20:.0f} MiB at load"
    assert anon_touched < size / 20, f"anonymous memory grew by {anon_touched / 2**20:.0f} MiB reading weights"
    assert file_touched > size / 2  # the reads did go through the file mapping


def test_verify_passes_run_in_the_compute_buffers_sized_at_load(tiny):
    """The load report is what generation uses: the compute buffers reserved at load for verify passes of 1 and of
    n_verify_rows rows are the ones those passes run in, so running them allocates nothing more (reserved under
    another graph class, each first verify allocated buffers of its own, and a device too small for them failed at
    the first request instead of at load)."""
    from glm5next_runtime import _core
    seq = new_sequence(_core.Model(str(tiny), []), 128, 64, 2, n_verify_rows=4)
    at_load = seq.engine.memory()
    seq.eval(random_tokens(20, seed=1))
    for rows in (random_tokens(1, seed=2), random_tokens(4, seed=3)):
        seq.verify(rows)
        seq.commit(len(rows))
    assert seq.engine.memory() == at_load


# ------------------------------------------------------------------------------------------ Python shell

def test_python_model(tiny, tmp_path):
    from glm5next_runtime import Model
    m = Model(tiny, n_ctx=128, n_batch=16, override_kv=["glm5-next.attention.indexer.top_k=int:32"])
    assert (m.n_ctx, m.n_batch, m.n_vocab, m.path) == (128, 16, 448, str(tiny)) and m.n_threads >= 1
    assert m.hparams["idx_top_k"] == 32 and m.metadata("glm5next.attention.indexer.top_k") == 32
    assert m.detokenize(m.tokenize("hi there")) == "hi there" and m.chat_template.startswith("[gMASK]<sop>")
    for kw in ({"n_ctx": 0}, {"n_ctx": 2**24 + 1}, {"n_batch": -1}, {"n_threads": 0}):
        with pytest.raises(ValueError, match=f"{next(iter(kw))} = "):
            Model(tiny, **kw)
    llama_vocab = rewrite(tiny, tmp_path / "spm.gguf", set_keys={"tokenizer.ggml.model": (VT.STRING, "llama")})
    with pytest.raises(ValueError, match="tokenizer 'llama'"):
        Model(llama_vocab)


def _status_bytes(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def test_read_into_memory_the_weights_are_the_files(tiny):
    """use_mmap=False (--no-mmap): the file is read into anonymous memory; every tensor holds the mapped one's bytes."""
    mapped, read = _core.Model(str(tiny)), _core.Model(str(tiny), use_mmap=False)
    for name, *_ in mapped.tensors():
        assert np.array_equal(mapped.tensor_data(name), read.tensor_data(name)), name


def test_locked_weights_are_locked(tiny):
    """use_mlock (--mlock): the mapping's pages are locked (VmLck grows by the file's size), unless the system's
    memory-lock limit refuses, which lock_error then names."""
    before = _status_bytes("VmLck")
    m = _core.Model(str(tiny), use_mlock=True)
    if not m.locked:
        assert m.lock_error, "mlock failed without a reason"
        pytest.skip(f"mlock refused here: {m.lock_error}")
    assert _status_bytes("VmLck") - before >= tiny.stat().st_size - 4096
    assert not _core.Model(str(tiny)).locked and _core.Model(str(tiny)).lock_error == ""
