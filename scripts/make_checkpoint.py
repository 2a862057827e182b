#!/usr/bin/env python3
"""Write small GLM-5.3-Flash (`glm5next`) checkpoints in the real Hugging Face hub layout.

The weights are random (deterministic by seed) but every name, shape, config field and file layout is the
real model's (docs/model.md, docs/gguf.md): `Glm5NextForConditionalGeneration`, text weights under
`model.language_model.`, `lm_head.weight`, a NextN (MTP) layer at index `num_hidden_layers`, a tiny vision
tower under `model.visual.` (the converter drops it), a byte-level BPE tokenizer with GLM's special tokens
and a chat template. transformers 5.23 loads every variant (the trunk; it ignores the NextN layer).

Use as a script (`python scripts/make_checkpoint.py OUT --preset tiny --dtype fp8`) or as a library
(`make_checkpoint(out_dir, **options)`, used by the tests).
"""
from __future__ import annotations

import argparse
import json
import math
import sysconfig
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from safetensors.torch import save_file

FP8_BLOCK = 128  # real checkpoints scale FP8 weights per 128x128 block (`*_scale_inv`)

GLM_SPECIAL_TOKENS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
    "<|end_of_video|>", "<|image|>", "<|video|>",
]
# added tokens that decode as text (the chat template's think and tool-call markup)
GLM_TEXT_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                   "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>", "/nothink"]

# GLM-4.x's pre-tokenizer split (llama.cpp's "glm4" pre-tokenizer uses the same expression)
GLM_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.reasoning_content is defined and m.reasoning_content -%}"
    "<|assistant|>\n<think>{{ m.reasoning_content }}</think>\n{{ m.content }}"
    "{%- else -%}<|{{ m.role }}|>\n{{ m.content }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>\n"
    "{{ '<think></think>\n' if (enable_thinking is defined and not enable_thinking) else '<think>' }}"
    "{%- endif -%}"
)


@dataclass
class CheckpointSpec:
    """Every knob of the generated checkpoint. Field names follow the hub config where one exists."""
    seed: int = 0
    hidden_size: int = 64
    num_hidden_layers: int = 4
    # one letter per trunk layer: K = KDA (linear_attention), D = DSA (sparse MLA)
    layer_pattern: str = "KDKD"
    # one letter per trunk layer: F = full indexer, S = shared (reuses the previous layer's selection)
    indexer_pattern: str | None = None
    first_k_dense_replace: int = 1
    intermediate_size: int = 128
    num_attention_heads: int = 4
    linear_head_dim: int = 16
    q_lora_rank: int = 32
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 16
    v_head_dim: int = 16
    index_n_heads: int = 8
    index_head_dim: int = 32
    index_topk: int = 16
    index_kpool: int = 4
    index_kpool_always_select_tail: bool = True
    n_routed_experts: int = 8
    num_experts_per_tok: int = 2
    n_shared_experts: int = 1
    moe_intermediate_size: int = 32
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 2.5
    swiglu_limit: float = 7.0
    tokenizer_vocab: int = 384        # BPE size before the special tokens
    nextn: bool = True                # write the NextN layer's weights
    claim_nextn: bool | None = None   # what config.json claims (default: same as `nextn`)
    # where config.json stores index_share_for_mtp_iteration: "text_config", "top" or None (absent)
    index_share_at: str | None = "text_config"
    index_share: bool = True
    flat_config: bool = False         # text fields at the top level (text-only hub configs)
    dtype: str = "bf16"               # bf16 | f32 | fp8 (e4m3 + 128x128 block scales) | fp8-grid
    shards: int = 1
    vision: bool = True
    # "predictable" weights (speculation tests): every block's output projection is scaled by this factor and the
    # draft head sees the token the trunk saw, so the NextN head predicts what the trunk will say next, except
    # where the (scaled) blocks change the trunk's mind. None = plain random weights.
    predictable: float | None = None
    extra_text_config: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        n = self.tokenizer_vocab + len(GLM_SPECIAL_TOKENS) + len(GLM_TEXT_TOKENS)
        return (n + 63) // 64 * 64  # padded like the real vocab (154880 > tokenizer size)


PRESETS: dict[str, dict] = {
    "tiny": {},
    # DSA layers back to back so that a "shared" layer follows a "full" one (transformers passes the
    # selection only to the next layer)
    "shared": {"num_hidden_layers": 5, "layer_pattern": "KDDKD", "indexer_pattern": "FFSFF"},
    "kpool8": {"index_kpool": 8, "index_topk": 32},
    "notail": {"index_kpool_always_select_tail": False},
    "groups": {"n_routed_experts": 16, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2},
    "dense-sparse": {"num_hidden_layers": 6, "layer_pattern": "KKDKKD", "first_k_dense_replace": 2},
    # many experts: peak-memory measurement of the converter (one layer's experts at a time)
    "many-experts": {"hidden_size": 256, "num_hidden_layers": 4, "n_routed_experts": 256,
                     "moe_intermediate_size": 256, "intermediate_size": 512, "num_experts_per_tok": 8},
    # the NextN head mostly predicts the trunk's next token: speculation accepts some drafts (tests)
    "predictable": {"predictable": 0.03},
    # decode is memory-bound at this size (issue 3 benchmark): q8_0 file ~750 MB
    "bench": {"hidden_size": 1024, "num_hidden_layers": 12, "layer_pattern": "KKKD" * 3,
              "num_attention_heads": 8, "linear_head_dim": 128, "q_lora_rank": 256, "kv_lora_rank": 512,
              "qk_nope_head_dim": 128, "v_head_dim": 128, "index_n_heads": 16, "index_head_dim": 64,
              "index_topk": 256, "n_routed_experts": 32, "num_experts_per_tok": 4,
              "moe_intermediate_size": 512, "intermediate_size": 2048, "first_k_dense_replace": 1},
    # GLM-5.3-Flash's attention widths (issue 27's cache measurements, scripts/cache_vs_llama_cpp.py): MLA 64 heads,
    # kv_lora 512, nope head 256, indexer 32 x 128 with top-k 2048 and kpool 4, KDA 64 x 128; 4 layers and a few
    # small experts so that it fits a small machine (~0.8 GB at q8_0)
    "real-widths": {"hidden_size": 4096, "num_attention_heads": 64, "linear_head_dim": 128, "q_lora_rank": 1536,
                    "kv_lora_rank": 512, "qk_nope_head_dim": 256, "v_head_dim": 256, "index_n_heads": 32,
                    "index_head_dim": 128, "index_topk": 2048, "index_kpool": 4, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 256, "intermediate_size": 1024},
}


def text_config(s: CheckpointSpec) -> dict:
    """The text model's config (config.json's `text_config`, or its top level when flat)."""
    assert len(s.layer_pattern) == s.num_hidden_layers, "layer_pattern needs one letter per trunk layer"
    indexer = s.indexer_pattern or "F" * s.num_hidden_layers
    claim_nextn = s.nextn if s.claim_nextn is None else s.claim_nextn
    cfg = {
        "model_type": "glm5_next_text",
        "vocab_size": s.vocab_size,
        "hidden_size": s.hidden_size,
        "intermediate_size": s.intermediate_size,
        "moe_intermediate_size": s.moe_intermediate_size,
        "num_hidden_layers": s.num_hidden_layers,
        "num_attention_heads": s.num_attention_heads,
        "num_key_value_heads": s.num_attention_heads,
        "n_shared_experts": s.n_shared_experts,
        "n_routed_experts": s.n_routed_experts,
        "num_experts_per_tok": s.num_experts_per_tok,
        "routed_scaling_factor": s.routed_scaling_factor,
        "n_group": s.n_group,
        "topk_group": s.topk_group,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "kv_lora_rank": s.kv_lora_rank,
        "q_lora_rank": s.q_lora_rank,
        "qk_rope_head_dim": 0,
        "qk_nope_head_dim": s.qk_nope_head_dim,
        "v_head_dim": s.v_head_dim,
        "mla_use_nope": True,
        "hidden_act": "silu",
        "max_position_embeddings": 1048576,
        "rms_norm_eps": 1e-5,
        "swiglu_limit": s.swiglu_limit,
        "tie_word_embeddings": False,
        "eos_token_id": [_special_id(s, "<|endoftext|>"), _special_id(s, "<|user|>"),
                         _special_id(s, "<|observation|>")],
        "pad_token_id": _special_id(s, "<|endoftext|>"),
        "layer_types": ["linear_attention" if c == "K" else "full_attention" for c in s.layer_pattern],
        "first_k_dense_replace": s.first_k_dense_replace,
        # transformers builds the FFN schedule from this list, not from first_k_dense_replace
        "mlp_layer_types": ["dense" if i < s.first_k_dense_replace else "sparse"
                            for i in range(s.num_hidden_layers)],
        "linear_attn_config": {"num_heads": s.num_attention_heads, "head_dim": s.linear_head_dim,
                               "short_conv_kernel_size": 4, "gate_lower_bound": -5.0, "safe_gate": True},
        "index_topk": s.index_topk,
        "index_head_dim": s.index_head_dim,
        "index_n_heads": s.index_n_heads,
        "index_kpool": s.index_kpool,
        "index_kpool_always_select_tail": s.index_kpool_always_select_tail,
        "indexer_types": ["full" if c == "F" else "shared" for c in indexer],
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "num_nextn_predict_layers": 1 if claim_nextn else 0,
    }
    if s.index_share_at == "text_config":
        cfg["index_share_for_mtp_iteration"] = s.index_share
    cfg.update(s.extra_text_config)
    return cfg


def _vision_config(s: CheckpointSpec) -> dict:
    return {"model_type": "glm5_next_vision", "depth": 1, "hidden_size": 32, "num_heads": 2,
            "intermediate_size": 64, "out_hidden_size": s.hidden_size, "projection_intermediate_size": 64,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}


def _config(s: CheckpointSpec) -> dict:
    text = text_config(s)
    dtype = {"f32": "float32"}.get(s.dtype, "bfloat16")
    if s.flat_config:
        cfg = {"architectures": ["Glm5NextForConditionalGeneration"], **text, "model_type": "glm5_next",
               "dtype": dtype}
        cfg.pop("index_share_for_mtp_iteration", None)
    else:
        cfg = {"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
               "text_config": text, "tie_word_embeddings": False, "dtype": dtype}
        if s.vision:
            cfg["vision_config"] = _vision_config(s)
    if s.index_share_at == "top" or (s.flat_config and s.index_share_at == "text_config"):
        cfg["index_share_for_mtp_iteration"] = s.index_share
    if s.dtype == "fp8":
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    return cfg


# ---------------------------------------------------------------------------------------------- tokenizer

def _special_id(s: CheckpointSpec, token: str) -> int:
    return s.tokenizer_vocab + (GLM_SPECIAL_TOKENS + GLM_TEXT_TOKENS).index(token)


def _tokenizer_corpus() -> list[str]:
    """A few files of Python's own standard library: present offline on every machine."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [(stdlib / name).read_text(encoding="utf-8") for name in ("textwrap.py", "string.py", "bisect.py")]


def write_tokenizer(s: CheckpointSpec, out: Path) -> None:
    """tokenizer.json (byte-level BPE, GLM split regex) + tokenizer_config.json with the chat template."""
    save_tokenizer(train_tokenizer(s.tokenizer_vocab, _tokenizer_corpus()), out)


def train_tokenizer(bpe_vocab: int, texts):
    """A tokenizers.Tokenizer: a byte-level BPE of `bpe_vocab` entries trained on `texts` (an iterable of str)
    with GLM's split regex, followed by GLM's special tokens (ids bpe_vocab, bpe_vocab + 1, ...) and text tokens.
    Raises AssertionError when the texts are too small to learn that many merges."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from tokenizers import AddedToken

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=bpe_vocab, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.get_vocab_size() == bpe_vocab, "corpus too small for the requested BPE size"
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in GLM_SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in GLM_TEXT_TOKENS])
    return tok


def save_tokenizer(tok, out: Path) -> None:
    """tokenizer.json + tokenizer_config.json (GLM's eos/pad and chat template) of a train_tokenizer() result."""
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False, "model_max_length": 1048576,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2))


# ------------------------------------------------------------------------------------------------ weights

class _Init:
    """Deterministic random tensors; scales keep activations O(1) through the random network."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, *shape, std=1.0, mean=0.0) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g) * std + mean

    def linear(self, out_f: int, in_f: int) -> torch.Tensor:
        return self.normal(out_f, in_f, std=1.0 / math.sqrt(in_f))

    def norm(self, n: int) -> torch.Tensor:
        return self.normal(n, std=0.1, mean=1.0)


def _hc_weights(rng: _Init, s: CheckpointSpec, prefix: str) -> dict[str, torch.Tensor]:
    mix = (2 + 4) * 4
    return {f"{prefix}_fn": rng.normal(mix, 4 * s.hidden_size, std=0.05),
            f"{prefix}_base": rng.normal(mix, std=0.3),
            f"{prefix}_scale": rng.normal(3, std=0.2, mean=1.0)}


def _kda_weights(rng: _Init, s: CheckpointSpec) -> dict[str, torch.Tensor]:
    h, d = s.hidden_size, s.linear_head_dim
    inner = s.num_attention_heads * d
    w = {f"self_attn.{n}_proj.weight": rng.linear(inner, h) for n in "qkv"}
    w |= {f"self_attn.{n}_conv1d.weight": rng.normal(inner, 1, 4, std=0.5) for n in "qkv"}
    w |= {"self_attn.f_a_proj.weight": rng.linear(d, h), "self_attn.f_b_proj.weight": rng.linear(inner, d),
          "self_attn.dt_bias": rng.normal(inner, std=0.5), "self_attn.A_log": rng.normal(s.num_attention_heads, std=0.5),
          "self_attn.b_proj.weight": rng.linear(s.num_attention_heads, h),
          "self_attn.g_a_proj.weight": rng.linear(d, h), "self_attn.g_b_proj.weight": rng.linear(inner, d),
          "self_attn.o_norm.weight": rng.norm(d), "self_attn.o_proj.weight": rng.linear(h, inner)}
    return w


def _dsa_weights(rng: _Init, s: CheckpointSpec, with_indexer: bool) -> dict[str, torch.Tensor]:
    h, heads = s.hidden_size, s.num_attention_heads
    w = {"self_attn.q_a_proj.weight": rng.linear(s.q_lora_rank, h),
         "self_attn.q_a_layernorm.weight": rng.norm(s.q_lora_rank),
         "self_attn.q_b_proj.weight": rng.linear(heads * s.qk_nope_head_dim, s.q_lora_rank),
         "self_attn.kv_a_proj_with_mqa.weight": rng.linear(s.kv_lora_rank, h),
         "self_attn.kv_a_layernorm.weight": rng.norm(s.kv_lora_rank),
         "self_attn.kv_b_proj.weight": rng.linear(heads * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank),
         "self_attn.o_proj.weight": rng.linear(h, heads * s.v_head_dim)}
    if with_indexer:
        w |= {"self_attn.indexer.wq_b.weight": rng.linear(s.index_n_heads * s.index_head_dim, s.q_lora_rank),
              "self_attn.indexer.wk.weight": rng.linear(s.index_head_dim, h),
              "self_attn.indexer.k_norm.weight": rng.norm(s.index_head_dim),
              "self_attn.indexer.k_norm.bias": rng.normal(s.index_head_dim, std=0.1),
              "self_attn.indexer.weights_proj.weight": rng.linear(s.index_n_heads, h),
              "self_attn.indexer.index_kpool_compress_gate": rng.linear(s.index_head_dim, h),
              "self_attn.indexer.index_kpool_compress_ape": rng.normal(s.index_kpool, s.index_head_dim, std=0.5)}
    return w


def _mlp_weights(rng: _Init, s: CheckpointSpec, prefix: str, inter: int) -> dict[str, torch.Tensor]:
    h = s.hidden_size
    return {f"{prefix}.gate_proj.weight": rng.linear(inter, h), f"{prefix}.up_proj.weight": rng.linear(inter, h),
            f"{prefix}.down_proj.weight": rng.linear(h, inter)}


def _moe_weights(rng: _Init, s: CheckpointSpec) -> dict[str, torch.Tensor]:
    w = {"mlp.gate.weight": rng.linear(s.n_routed_experts, s.hidden_size),
         "mlp.gate.e_score_correction_bias": rng.normal(s.n_routed_experts, std=0.05)}
    for e in range(s.n_routed_experts):
        w |= _mlp_weights(rng, s, f"mlp.experts.{e}", s.moe_intermediate_size)
    w |= _mlp_weights(rng, s, "mlp.shared_experts", s.moe_intermediate_size * s.n_shared_experts)
    return w


def _layer_weights(rng: _Init, s: CheckpointSpec, i: int) -> dict[str, torch.Tensor]:
    """Weights of trunk layer i (i < num_hidden_layers) or of the NextN layer (i == num_hidden_layers)."""
    nextn = i == s.num_hidden_layers
    w = {"input_layernorm.weight": rng.norm(s.hidden_size), "post_attention_layernorm.weight": rng.norm(s.hidden_size)}
    if nextn:  # no mHC; own indexer (always full); MoE
        w |= _dsa_weights(rng, s, with_indexer=True) | _moe_weights(rng, s)
        w |= {"eh_proj.weight": rng.linear(s.hidden_size, 2 * s.hidden_size), "enorm.weight": rng.norm(s.hidden_size),
              "hnorm.weight": rng.norm(s.hidden_size), "shared_head.norm.weight": rng.norm(s.hidden_size)}
    else:
        w |= _hc_weights(rng, s, "hc_attn") | _hc_weights(rng, s, "hc_ffn")
        if s.layer_pattern[i] == "K":
            w |= _kda_weights(rng, s)
        else:
            full = (s.indexer_pattern or "F" * s.num_hidden_layers)[i] == "F"
            w |= _dsa_weights(rng, s, with_indexer=full)
        w |= (_mlp_weights(rng, s, "mlp", s.intermediate_size) if i < s.first_k_dense_replace
              else _moe_weights(rng, s))
    return {f"model.language_model.layers.{i}.{k}": v for k, v in w.items()}


def vision_weights(s: CheckpointSpec) -> dict[str, torch.Tensor]:
    """The vision tower's real parameter names and shapes, taken from transformers at the tiny size."""
    from transformers import Glm5NextVisionConfig
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextVisionModel

    torch.manual_seed(s.seed)
    model = Glm5NextVisionModel(Glm5NextVisionConfig(**_vision_config(s)))
    return {f"model.visual.{k}": v.detach().clone() for k, v in model.state_dict().items()
            if not k.endswith("inv_freq")}


def fp8_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-quantize a 2-D weight to float8_e4m3fn with one float32 scale per 128x128 block.

    Scales are powers of two, so dequantized values (q * scale) are exact in bf16: an FP8 checkpoint and its
    `fp8-grid` bf16 sibling hold the same numbers. Returns (q [out, in] e4m3, scale_inv [ceil(out/128),
    ceil(in/128)] float32).
    """
    rows, cols = w.shape
    br, bc = -(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)
    padded = torch.zeros(br * FP8_BLOCK, bc * FP8_BLOCK)
    padded[:rows, :cols] = w
    blocks = padded.view(br, FP8_BLOCK, bc, FP8_BLOCK)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-12)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))  # e4m3 max is 448
    q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    return q.view(br * FP8_BLOCK, bc * FP8_BLOCK)[:rows, :cols].contiguous(), scale


def _is_fp8_weight(name: str, t: torch.Tensor) -> bool:
    """Which tensors real FP8 checkpoints store as e4m3: the big projections (not norms, router, embeddings,
    lm_head, mHC, convs, the indexer's tiny weights_proj and the vision tower)."""
    return (t.ndim == 2 and name.endswith("_proj.weight") and "weights_proj" not in name
            and name.startswith("model.language_model.layers."))


def _finalize(s: CheckpointSpec, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in tensors.items():
        if s.dtype in ("fp8", "fp8-grid") and _is_fp8_weight(name, t):
            q, scale = fp8_quantize(t)
            if s.dtype == "fp8":
                out[name] = q
                out[name.removesuffix(".weight") + ".weight_scale_inv"] = scale
                continue
            t = _dequant(q, scale)  # fp8-grid: the bf16 sibling of the fp8 checkpoint (same numbers)
        keep_f32 = name.endswith(("A_log", "dt_bias", "e_score_correction_bias", "_base", "_scale"))
        out[name] = t.float() if (s.dtype == "f32" or keep_f32) else t.to(torch.bfloat16)
    return out


def _dequant(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rep = scale.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)
    return q.float() * rep[: q.shape[0], : q.shape[1]]


def _make_predictable(s: CheckpointSpec, t: dict[str, torch.Tensor]) -> None:
    """Blocks write only `predictable`-scaled outputs into the residual streams, so the trunk's next-token logits
    are nearly lm_head(norm(E[x_p])) (comb is doubly stochastic, so equal streams stay equal); the NextN head's
    eh_proj passes the embedding half through and its norms are 1, so its logits are nearly
    lm_head(norm(E[x_{p+1}])): the trunk's prediction one step ahead."""
    out_proj = ("o_proj.weight", "down_proj.weight")
    for name in t:
        if name.endswith(out_proj) and ".layers." in name:
            t[name] = t[name] * s.predictable
        if name.endswith(("norm.weight", "enorm.weight", "hnorm.weight")) and "layernorm" not in name:
            t[name] = torch.ones_like(t[name])
    h = s.hidden_size
    nextn = f"model.language_model.layers.{s.num_hidden_layers}."
    if nextn + "eh_proj.weight" in t:
        t[nextn + "eh_proj.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1)


def _all_tensors(s: CheckpointSpec) -> dict[str, torch.Tensor]:
    rng = _Init(s.seed)
    t = {"model.language_model.embed_tokens.weight": rng.normal(s.vocab_size, s.hidden_size)}
    for i in range(s.num_hidden_layers):
        t |= _layer_weights(rng, s, i)
    nextn = _layer_weights(rng, s, s.num_hidden_layers)  # drawn always, so variants share trunk weights
    if s.nextn:
        t |= nextn
    t["model.language_model.norm.weight"] = rng.norm(s.hidden_size)
    t["lm_head.weight"] = rng.linear(s.vocab_size, s.hidden_size)
    if s.vision and not s.flat_config:
        t |= vision_weights(s)
    if s.predictable is not None:
        _make_predictable(s, t)
    return t


def _write_safetensors(s: CheckpointSpec, tensors: dict[str, torch.Tensor], out: Path) -> None:
    meta = {"format": "pt"}
    if s.shards <= 1:
        save_file(tensors, str(out / "model.safetensors"), metadata=meta)
        return
    names = list(tensors)
    per = -(-len(names) // s.shards)
    weight_map, total = {}, 0
    for k in range(s.shards):
        fname = f"model-{k + 1:05d}-of-{s.shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k * per:(k + 1) * per]}
        save_file(part, str(out / fname), metadata=meta)
        weight_map |= {n: fname for n in part}
        total += sum(t.numel() * t.element_size() for t in part.values())
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def make_checkpoint(out_dir: str | Path, preset: str = "tiny", **overrides) -> Path:
    """Write a checkpoint directory (config.json, generation_config.json, safetensors, tokenizer).

    `preset` names an entry of PRESETS; `overrides` set CheckpointSpec fields on top of it. Returns the
    directory. Deterministic: the same arguments give byte-identical weights. Raises KeyError for an unknown
    preset and TypeError for an unknown field.
    """
    spec = replace(CheckpointSpec(), **(PRESETS[preset] | overrides))
    return write_checkpoint(out_dir, spec, _all_tensors(spec))


def write_checkpoint(out_dir: str | Path, spec: CheckpointSpec, tensors: dict[str, torch.Tensor],
                     tokenizer=None) -> Path:
    """Write `tensors` (hub names, float; stored in spec.dtype) as the checkpoint `spec` describes: config.json,
    generation_config.json, the tokenizer (`tokenizer`, a train_tokenizer() result, else one trained on a few
    stdlib files), safetensors, glm5next_spec.json. Returns the directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(_config(spec), indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": text_config(spec)["eos_token_id"], "pad_token_id": _special_id(spec, "<|endoftext|>")}))
    if tokenizer is None:
        write_tokenizer(spec, out)
    else:
        save_tokenizer(tokenizer, out)
    _write_safetensors(spec, _finalize(spec, tensors), out)
    (out / "glm5next_spec.json").write_text(json.dumps(asdict(spec), indent=2))  # how it was made
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32", "fp8", "fp8-grid"])
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--no-nextn", action="store_true", help="omit the NextN layer's weights")
    p.add_argument("--claim-nextn", action="store_true", help="config claims a NextN layer even with --no-nextn")
    p.add_argument("--index-share-at", default="text_config", choices=["text_config", "top", "absent"])
    p.add_argument("--index-share", default="true", choices=["true", "false"])
    p.add_argument("--flat-config", action="store_true")
    p.add_argument("--index-topk", type=int)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                   help="any CheckpointSpec field, e.g. --set hidden_size=128")
    a = p.parse_args(argv)
    over = {"seed": a.seed, "dtype": a.dtype, "shards": a.shards, "nextn": not a.no_nextn,
            "index_share_at": None if a.index_share_at == "absent" else a.index_share_at,
            "index_share": a.index_share == "true", "flat_config": a.flat_config}
    if a.claim_nextn:
        over["claim_nextn"] = True
    if a.index_topk:
        over["index_topk"] = a.index_topk
    for kv in a.set:
        k, v = kv.split("=", 1)
        over[k] = json.loads(v)
    out = make_checkpoint(a.out_dir, a.preset, **over)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
