"""The converter applies the loader's rules before it writes (issue 14): a config whose metadata the loader would
refuse (index_topk 0, more experts used than exist, ...) fails with one line naming the config field and the GGUF
key, before any tensor data is read, and leaves no scratch file. The rules themselves live in the C++ loader
(_core.read_hparams); the converter only maps a refused key back to its config field."""
from __future__ import annotations

import tempfile

import gguf
import pytest

from convert_checks import assert_refused, edit_config, fresh_copy
from test_convert_roundtrip import meta

KEY = "glm5next."


@pytest.fixture
def job(checkpoints, tmp_path):
    return fresh_copy(checkpoints.make("bad-base", dtype="f32"), tmp_path)


@pytest.mark.parametrize("fields, field, key", [
    ({"index_topk": 0}, "index_topk", "attention.indexer.top_k"),
    ({"index_topk": 2**24 + 4}, "index_topk", "attention.indexer.top_k"),
    ({"index_topk": 18}, "index_kpool (with index_topk)", "attention.indexer.kpool"),  # kpool 4 must divide top_k
    ({"num_experts_per_tok": 9}, "num_experts_per_tok (with n_routed_experts)", "expert_used_count"),  # 8 experts
    ({"num_experts_per_tok": 0}, "num_experts_per_tok (with n_routed_experts)", "expert_used_count"),
    ({"n_group": 3}, "n_group (with topk_group)", "expert_group_count"),
    ({"topk_group": 2}, "n_group (with topk_group)", "expert_group_count"),  # more groups used than exist
    ({"hc_sinkhorn_iters": 0}, "hc_sinkhorn_iters", "hyper_connection.sinkhorn_iterations"),
    ({"hc_sinkhorn_iters": 2**31}, "hc_sinkhorn_iters", "hyper_connection.sinkhorn_iterations"),
    ({"rms_norm_eps": -1}, "rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ({"rms_norm_eps": 0}, "rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ({"hc_eps": 2.0}, "hc_eps", "hyper_connection.epsilon"),
    ({"swiglu_limit": -1.0}, "swiglu_limit", "swiglu_clamp_exp"),
    ({"routed_scaling_factor": 0}, "routed_scaling_factor", "expert_weights_scale"),
    ({"linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4,
                             "gate_lower_bound": 1e6}}, "linear_attn_config.gate_lower_bound", "kda.gate_lower_bound"),
    ({"indexer_types": ["full", "shared", "full", "full"]}, "indexer_types", "attention.indexer.types"),
])
def test_config_the_loader_would_refuse_fails_before_writing(job, capsys, monkeypatch, fields, field, key):
    """Naming the field and the key, with no tensor data read (so a 300 GB conversion fails in a second)."""
    from glm5next_convert.checkpoint import Checkpoint

    ckpt, out = job
    edit_config(ckpt, text=fields)
    reads = []
    monkeypatch.setattr(Checkpoint, "read", lambda self, name: reads.append(name))
    line = assert_refused(ckpt, out, capsys, f"config.json: field {field}: the loader refuses",
                          f"key {KEY}{key}")
    assert reads == [], line


def test_loader_check_leaves_no_scratch_file(job, capsys, monkeypatch, tmp_path):
    ckpt, out = job
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    edit_config(ckpt, text={"index_topk": 0})
    assert_refused(ckpt, out, capsys, "index_topk")
    assert list(scratch.iterdir()) == []


def test_loader_check_reads_the_metadata_the_file_gets(job, monkeypatch):
    """The scratch file holds exactly the key-value pairs of the output (vocab included), no tensors."""
    from glm5next_convert import convert
    from glm5next_runtime import _core

    ckpt, out = job
    checked = []
    real = _core.read_hparams

    def spy(path, overrides):
        r = gguf.GGUFReader(path)
        checked.append(({k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}, len(r.tensors)))
        return real(path, overrides)

    monkeypatch.setattr(_core, "read_hparams", spy)
    convert(ckpt, out, outtype="f32", progress=False, log=lambda m: None)
    (kv, n_tensors), = checked
    assert n_tensors == 0 and kv == meta(out)


def test_every_metadata_key_names_its_config_field(checkpoints):
    """CONFIG_FIELD_OF_KEY covers every `{arch}.` key write_metadata writes, so a refusal can name the field."""
    from glm5next_convert.checkpoint import Checkpoint
    from glm5next_convert.hparams import CONFIG_FIELD_OF_KEY, read_hparams, write_metadata

    hp = read_hparams(Checkpoint(checkpoints.make("bad-base", dtype="f32")).config)
    hp.kda_gate_lower_bound = -5.0
    w = gguf.GGUFWriter(path=None, arch="glm5next")
    write_metadata(w, "glm5next", hp, 1, name="x")
    written = {k.removeprefix(KEY) for k in w.kv_data[0] if k.startswith(KEY)}
    assert written and written <= set(CONFIG_FIELD_OF_KEY), written - set(CONFIG_FIELD_OF_KEY)
