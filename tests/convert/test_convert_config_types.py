"""config.json fields are read by JSON type (issue 14): a wrongly typed or out-of-range field is one error line
naming it (exit code 1, nothing written), never a traceback and never a silently wrong value ("no" read as true).
"""
from __future__ import annotations

import pytest

from convert_checks import assert_refused, edit_config, fresh_copy, run_main
from test_convert_roundtrip import meta

NAN, INF = float("nan"), float("inf")


@pytest.fixture
def job(checkpoints, tmp_path):
    return fresh_copy(checkpoints.make("bad-base", dtype="f32"), tmp_path)


@pytest.mark.parametrize("field, value, needle", [
    ("num_hidden_layers", "12", "text_config.num_hidden_layers: expected an integer, got '12' (a string)"),
    ("num_hidden_layers", 4.0, "text_config.num_hidden_layers: expected an integer, got 4.0 (a number)"),
    ("num_hidden_layers", True, "text_config.num_hidden_layers: expected an integer, got true (a boolean)"),
    ("num_hidden_layers", 10**12, "text_config.num_hidden_layers: 1000000000000 is out of range"),
    ("hidden_size", -64, "text_config.hidden_size: -64 is out of range [0, 4294967295]"),
    ("index_topk", 2**32, "text_config.index_topk: 4294967296 is out of range [0, 4294967295]"),
    ("n_routed_experts", None, "text_config.n_routed_experts: expected an integer, got None (null)"),
    ("rms_norm_eps", "1e-5", "text_config.rms_norm_eps: expected a number, got '1e-5' (a string)"),
    ("rms_norm_eps", NAN, "text_config.rms_norm_eps: nan is not a finite number"),
    ("routed_scaling_factor", INF, "text_config.routed_scaling_factor: inf is not a finite number"),
    ("swiglu_limit", 1e39, "text_config.swiglu_limit: 1e+39 is not a finite number"),  # beyond float32
    ("hc_eps", 10**400, "text_config.hc_eps: 1000000000"),
    ("index_share_for_mtp_iteration", "no", "text_config.index_share_for_mtp_iteration: expected true or false, "
                                            "got 'no' (a string)"),
    ("index_share_for_mtp_iteration", 0, "text_config.index_share_for_mtp_iteration: expected true or false, "
                                         "got 0 (an integer)"),
    ("index_share_for_mtp_iteration", None, "text_config.index_share_for_mtp_iteration: expected true or false, "
                                            "got None (null)"),
    ("norm_topk_prob", "true", "text_config.norm_topk_prob: expected true or false"),
    ("index_kpool_always_select_tail", 1, "text_config.index_kpool_always_select_tail: expected true or false"),
    ("tie_word_embeddings", "false", "text_config.tie_word_embeddings: expected true or false"),
    ("layer_types", "linear_attention", "text_config.layer_types: expected a list, got 'linear_attention'"),
    ("layer_types", [1, 2, 3, 4], "text_config.layer_types[0]: expected one of"),
    ("layer_types", ["linear_attention"] * 3, "text_config.layer_types: has 3 entries, num_hidden_layers is 4"),
    ("indexer_types", ["full"] * 5, "text_config.indexer_types: has 5 entries, num_hidden_layers is 4"),
    ("indexer_types", ["full", "full", {"a": 1}, "full"], "text_config.indexer_types[2]: expected one of"),
    ("mlp_layer_types", ["dense"] * 5, "text_config.mlp_layer_types: has 5 entries, num_hidden_layers is 4"),
    ("eos_token_id", "2", "text_config.eos_token_id: expected an integer, got '2'"),
    ("eos_token_id", [1, "x"], "text_config.eos_token_id[1]: expected an integer"),
    ("eos_token_id", -1, "text_config.eos_token_id: -1 is out of range"),
    ("eos_token_id", 10**6, "eos_token_id: token id 1000000 does not fit vocab_size 448"),
    ("pad_token_id", 1.5, "text_config.pad_token_id: expected an integer, got 1.5"),
    ("linear_attn_config", "x", "text_config.linear_attn_config: expected an object, got 'x' (a string)"),
    ("linear_attn_config", {"head_dim": "16"}, "text_config.linear_attn_config.head_dim: expected an integer"),
    ("linear_attn_config", {"gate_lower_bound": "low"},
     "text_config.linear_attn_config.gate_lower_bound: expected a number, got 'low' (a string)"),
    ("linear_attn_config", {"safe_gate": "yes", "gate_lower_bound": None},
     "text_config.linear_attn_config.safe_gate: expected true or false"),
    ("num_nextn_predict_layers", "1", "text_config.num_nextn_predict_layers: expected an integer"),
])
def test_wrongly_typed_config_field_is_refused_naming_it(job, capsys, field, value, needle):
    ckpt, out = job
    edit_config(ckpt, text={field: value})
    assert_refused(ckpt, out, capsys, "config.json: field " + needle)


def test_first_k_dense_replace_beyond_the_layers_is_refused(job, capsys):
    """Read when mlp_layer_types is absent: it must fit the layer count (it sizes a list)."""
    ckpt, out = job
    edit_config(ckpt, text={"first_k_dense_replace": 99}, drop=("mlp_layer_types",))
    assert_refused(ckpt, out, capsys, "config.json: field text_config.first_k_dense_replace: 99 is out of range [0, 4]")


@pytest.mark.parametrize("top, needle", [
    ({"text_config": "junk"}, "field text_config: expected an object, got 'junk' (a string)"),
    ({"model_type": 5}, "field model_type: expected a string, got 5"),
    ({"quantization_config": {"weight_block_size": [0, 128]}},
     "field quantization_config.weight_block_size[0]: 0 is out of range [1, 4294967295]"),
    ({"quantization_config": {"weight_block_size": "x"}},
     "field quantization_config.weight_block_size: expected a list, got 'x' (a string)"),
    ({"quantization_config": {"weight_block_size": [128]}},
     "field quantization_config.weight_block_size: has 1 entries, expected 2"),
    ({"quantization_config": {"weight_block_size": [128, 128.0]}},
     "field quantization_config.weight_block_size[1]: expected an integer, got 128.0"),
    ({"quantization_config": "fp8"}, "field quantization_config: expected an object, got 'fp8'"),
])
def test_wrongly_typed_top_level_field_is_refused_naming_it(job, capsys, top, needle):
    ckpt, out = job
    edit_config(ckpt, top=top)
    assert_refused(ckpt, out, capsys, "config.json: " + needle)


@pytest.mark.parametrize("text", ["[1, 2]", "\"glm5_next\"", "null", "[" * 100_000 + "]" * 100_000])
def test_config_that_is_not_an_object_is_refused(job, capsys, text):
    ckpt, out = job
    (ckpt / "config.json").write_text(text)
    assert_refused(ckpt, out, capsys, "config.json: ")


def test_null_optional_fields_take_their_defaults(job, capsys):
    """null where transformers allows it (pad/eos ids, the NextN claim, the gate bound) is not an error."""
    ckpt, out = job
    edit_config(ckpt, text={"pad_token_id": None, "eos_token_id": None, "num_nextn_predict_layers": None,
                            "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4,
                                                   "gate_lower_bound": None, "safe_gate": False}})
    rc, err = run_main(ckpt, out, capsys)
    assert rc == 0, err
    m = meta(out)
    assert "tokenizer.ggml.padding_token_id" not in m and "glm5next.kda.gate_lower_bound" not in m


def test_boolean_fields_are_written_as_given(job, capsys):
    """A real JSON false stays false (the config's bools are never coerced)."""
    ckpt, out = job
    edit_config(ckpt, text={"index_share_for_mtp_iteration": False, "norm_topk_prob": False,
                            "index_kpool_always_select_tail": False})
    rc, err = run_main(ckpt, out, capsys)
    assert rc == 0, err
    m = meta(out)
    assert m["glm5next.index_share_for_mtp_iteration"] is False and m["glm5next.expert_weights_norm"] is False
    assert m["glm5next.attention.indexer.kpool_select_tail"] is False

