"""Round trip HF -> GGUF: every tensor equals the HF tensor after docs/gguf.md's transform, every key has
docs/gguf.md's value. The expected transforms are written out again here (not imported from the converter) so that a
wrong converter cannot agree with itself."""
from __future__ import annotations

import json
import re

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from safetensors import safe_open

ARCH = "glm5next"


def hf_tensors(ckpt) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            out |= {k: st.get_tensor(k).to(torch.float32).numpy() for k in st.keys()}
    return out


def expected_tensors(ckpt) -> dict[str, np.ndarray]:
    """GGUF name -> float32 numpy array (GGUF numpy shape), straight from docs/gguf.md's table (Tensors)."""
    hf = hf_tensors(ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())["text_config"]
    heads, nope = cfg["num_attention_heads"], cfg["qk_nope_head_dim"]
    simple = {
        "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.f_a_proj.weight": "ssm_f_a.weight", "self_attn.f_b_proj.weight": "ssm_f_b.weight",
        "self_attn.dt_bias": "ssm_dt.bias", "self_attn.b_proj.weight": "ssm_beta.weight",
        "self_attn.g_a_proj.weight": "ssm_g_a.weight", "self_attn.g_b_proj.weight": "ssm_g_b.weight",
        "self_attn.o_norm.weight": "ssm_norm.weight", "self_attn.q_a_proj.weight": "attn_q_a.weight",
        "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight", "self_attn.q_b_proj.weight": "attn_q_b.weight",
        "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
        "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
        "self_attn.indexer.wq_b.weight": "indexer.attn_q_b.weight", "self_attn.indexer.wk.weight": "indexer.attn_k.weight",
        "self_attn.indexer.k_norm.weight": "indexer.k_norm.weight", "self_attn.indexer.k_norm.bias": "indexer.k_norm.bias",
        "self_attn.indexer.weights_proj.weight": "indexer.proj.weight",
        "self_attn.indexer.index_kpool_compress_gate": "indexer_compressor_gate.weight",
        "self_attn.indexer.index_kpool_compress_ape": "indexer_compressor_ape.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
        "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
        "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
        "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
        "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
        "eh_proj.weight": "nextn.eh_proj.weight", "enorm.weight": "nextn.enorm.weight",
        "hnorm.weight": "nextn.hnorm.weight", "shared_head.norm.weight": "nextn.shared_head_norm.weight",
        **{f"hc_{b}_{p}": f"hc_{b}_{p}.weight" for b in ("attn", "ffn") for p in ("fn", "base", "scale")},
    }
    exp = {"token_embd.weight": hf["model.language_model.embed_tokens.weight"],
           "output_norm.weight": hf["model.language_model.norm.weight"], "output.weight": hf["lm_head.weight"]}
    experts: dict[str, dict[int, np.ndarray]] = {}
    for name, t in hf.items():
        m = re.match(r"model\.language_model\.layers\.(\d+)\.(.+)", name)
        if not m:
            continue
        blk, rest = f"blk.{m[1]}.", m[2]
        if rest in simple:
            exp[blk + simple[rest]] = t
        elif rest.endswith("_conv1d.weight"):
            exp[blk + f"ssm_conv1d_{rest[len('self_attn.')]}.weight"] = t.reshape(1, t.shape[0], 1, t.shape[2])
        elif rest == "self_attn.A_log":
            exp[blk + "ssm_a"] = -np.exp(t)
        elif rest == "self_attn.kv_b_proj.weight":
            kv = t.reshape(heads, -1, t.shape[1])
            exp[blk + "attn_k_b.weight"] = kv[:, :nope].transpose(0, 2, 1)
            exp[blk + "attn_v_b.weight"] = kv[:, nope:]
        elif (e := re.match(r"mlp\.experts\.(\d+)\.(\w+)_proj\.weight", rest)):
            experts.setdefault(blk + f"ffn_{e[2]}_exps.weight", {})[int(e[1])] = t
        else:
            raise AssertionError(f"test table lacks {rest}")
    for name, parts in experts.items():
        exp[name] = np.stack([parts[i] for i in range(len(parts))])
    return exp


def gguf_tensors(path) -> dict[str, tuple[QT, np.ndarray]]:
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        out[t.name] = (t.tensor_type, gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape))
    return out


def meta(path) -> dict:
    r = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


# Error bounds per stored type. f16 / bf16 round to nearest: half an ulp, 2^-11 / 2^-8 relative.
# q8_0: step d = amax/127 per block of 32; error <= d/2 from rounding + |q| * (f16 rounding of d)
#       <= d * (1/2 + 127 * 2^-11).
# q4_0: d = (signed max)/-8, so the opposite extreme can clip by a whole step: error <= d * (1 + 8 * 2^-11).
def within_bound(got: np.ndarray, want: np.ndarray, qt: QT) -> bool:
    if qt == QT.F32:
        return np.array_equal(got, want)
    if qt in (QT.F16, QT.BF16):
        rel = 2.0 ** -11 if qt == QT.F16 else 2.0 ** -8
        return bool(np.all(np.abs(got - want) <= rel * np.abs(want) + 1e-7))
    blocks_w = want.reshape(-1, 32)
    amax = np.abs(blocks_w).max(axis=1, keepdims=True)
    step = amax / (127 if qt == QT.Q8_0 else 8)
    slack = 0.5 + 127 * 2.0 ** -11 if qt == QT.Q8_0 else 1 + 8 * 2.0 ** -11
    return bool(np.all(np.abs(got.reshape(-1, 32) - blocks_w) <= slack * step + 1e-7))


@pytest.fixture(scope="module")
def f32_ckpt(checkpoints):
    return checkpoints.make("rt-f32", dtype="f32")


@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0", "q4_0"])
def test_every_tensor_round_trips(checkpoints, f32_ckpt, outtype):
    path = checkpoints.convert(f32_ckpt, outtype=outtype)
    want = expected_tensors(f32_ckpt)
    got = gguf_tensors(path)
    assert set(got) == set(want)
    for name, (qt, data) in got.items():
        assert data.shape == want[name].shape, name
        assert within_bound(data, want[name], qt), f"{name} ({qt.name}) off by {np.abs(data - want[name]).max()}"


def test_type_rules(checkpoints, f32_ckpt):
    types = {n: qt for n, (qt, _) in gguf_tensors(checkpoints.convert(f32_ckpt, outtype="q4_0")).items()}
    for n, qt in types.items():
        if re.search(r"norm|hc_|ssm_conv1d|ssm_a$|ssm_dt|ffn_gate_inp|exp_probs_b|indexer\.proj|indexer_compressor", n):
            assert qt == QT.F32, n
        elif re.search(r"indexer\.attn_(q_b|k)|ssm_(f|g)_(a|b)|ssm_beta|attn_kv_a_mqa|attn_(k|v)_b", n):
            assert qt == QT.F16, n  # never quantized
        elif re.search(r"attn_q_a\.|attn_q_b\.|nextn\.eh_proj|^output\.weight", n):
            assert qt == QT.Q8_0, n  # never below q8_0
        else:
            assert qt == QT.Q4_0, n
    assert types["blk.1.attn_q_b.weight"] == QT.Q8_0 and types["blk.1.indexer.attn_q_b.weight"] == QT.F16


def test_mtp_type_sets_only_the_draft_layer(checkpoints, f32_ckpt):
    types = {n: qt for n, (qt, _) in gguf_tensors(
        checkpoints.convert(f32_ckpt, tag="-mtpq4", outtype="bf16", mtp_type="q4_0")).items()}
    nextn = "blk.4."
    assert types[nextn + "ffn_up_exps.weight"] == QT.Q4_0 and types[nextn + "attn_output.weight"] == QT.Q4_0
    assert types[nextn + "nextn.eh_proj.weight"] == QT.Q8_0
    assert types["blk.3.ffn_up_exps.weight"] == QT.BF16 and types["token_embd.weight"] == QT.BF16


def test_metadata_has_every_key(checkpoints, f32_ckpt):
    m = meta(checkpoints.convert(f32_ckpt, outtype="f32"))
    tok = json.loads((f32_ckpt / "tokenizer.json").read_text())
    p = ARCH + "."
    want = {
        "general.architecture": ARCH, "general.file_type": 0,
        p + "block_count": 5, p + "context_length": 1048576, p + "embedding_length": 64,
        p + "feed_forward_length": 128, p + "vocab_size": 448, p + "attention.head_count": 4,
        p + "attention.head_count_kv": [0, 1, 0, 1, 1], p + "attention.layer_norm_rms_epsilon": pytest.approx(1e-5),
        p + "attention.layer_norm_epsilon": pytest.approx(1e-6), p + "attention.q_lora_rank": 32,
        p + "attention.kv_lora_rank": 64, p + "attention.key_length": 64, p + "attention.value_length": 64,
        p + "attention.key_length_mla": 16, p + "attention.value_length_mla": 16, p + "rope.dimension_count": 0,
        p + "attention.indexer.head_count": 8, p + "attention.indexer.key_length": 32,
        p + "attention.indexer.top_k": 16, p + "attention.indexer.kpool": 4,
        p + "attention.indexer.kpool_select_tail": True, p + "attention.indexer.types": [True] * 4,
        p + "index_share_for_mtp_iteration": True, p + "nextn_predict_layers": 1,
        p + "leading_dense_block_count": 1, p + "expert_count": 8, p + "expert_used_count": 2,
        p + "expert_shared_count": 1, p + "expert_group_count": 1, p + "expert_group_used_count": 1,
        p + "expert_feed_forward_length": 32, p + "expert_weights_scale": 2.5, p + "expert_weights_norm": True,
        p + "expert_gating_func": 2, p + "swiglu_clamp_exp": [7.0] * 5, p + "swiglu_clamp_shexp": [7.0] * 5,
        p + "ssm.conv_kernel": 4, p + "kda.head_dim": 16, p + "kda.gate_lower_bound": -5.0,
        p + "hyper_connection.count": 4, p + "hyper_connection.sinkhorn_iterations": 20,
        p + "hyper_connection.epsilon": pytest.approx(1e-6),
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "glm4",
        "tokenizer.ggml.bos_token_id": 386, "tokenizer.ggml.eot_token_id": 391,
        "tokenizer.ggml.eom_token_id": 393, "tokenizer.ggml.unknown_token_id": 384,
        "tokenizer.ggml.eos_token_id": 384, "tokenizer.ggml.padding_token_id": 384,
    }
    for k, v in want.items():
        assert k in m, k
        assert m[k] == v, (k, m[k])
    assert m["tokenizer.ggml.tokens"][:384] == sorted(tok["model"]["vocab"], key=tok["model"]["vocab"].get)
    assert m["tokenizer.ggml.tokens"][384:386] == ["<|endoftext|>", "[MASK]"]
    assert m["tokenizer.ggml.tokens"][-1] == "[PAD447]" and m["tokenizer.ggml.token_type"][-1] == gguf.TokenType.UNUSED
    assert m["tokenizer.ggml.token_type"][386] == gguf.TokenType.CONTROL
    assert m["tokenizer.ggml.merges"][0] == " ".join(tok["model"]["merges"][0])
    assert "[gMASK]<sop>" in m["tokenizer.chat_template"]


def test_layouts(checkpoints, f32_ckpt):
    trunk = checkpoints.convert(f32_ckpt, tag="-trunk", outtype="f32", layout="no-mtp")
    draft = checkpoints.convert(f32_ckpt, tag="-draft", outtype="f32", layout="mtp-only")
    mt, md = meta(trunk), meta(draft)
    assert mt[ARCH + ".block_count"] == 4 and ARCH + ".nextn_predict_layers" not in mt
    assert not [n for n in gguf_tensors(trunk) if n.startswith("blk.4.")]
    assert md[ARCH + ".block_count"] == 5 and md[ARCH + ".nextn_predict_layers"] == 1
    assert {n.split(".")[0] + "." + n.split(".")[1] for n in gguf_tensors(draft) if n.startswith("blk.")} == {"blk.4"}
    assert {"token_embd.weight", "output_norm.weight", "output.weight"} <= set(gguf_tensors(draft))


def test_sharded_checkpoint_converts_identically(checkpoints, f32_ckpt):
    sharded = checkpoints.make("rt-f32-sharded", dtype="f32", shards=3)
    assert (sharded / "model.safetensors.index.json").is_file()
    a, b = gguf_tensors(checkpoints.convert(f32_ckpt, outtype="f32")), gguf_tensors(checkpoints.convert(sharded, outtype="f32"))
    assert list(a) == list(b)
    assert all(np.array_equal(a[n][1], b[n][1]) for n in a)


def test_arch_spelling_prefixes_every_key(checkpoints, f32_ckpt):
    m = meta(checkpoints.convert(f32_ckpt, tag="-dash", outtype="f32", arch="glm5-next"))
    assert m["general.architecture"] == "glm5-next"
    assert not [k for k in m if k.startswith("glm5next.")]
    assert m["glm5-next.index_share_for_mtp_iteration"] is True
