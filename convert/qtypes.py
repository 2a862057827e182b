"""Which ggml type each GGUF tensor gets (docs/gguf.md, Types), and its bytes.

The rules mirror llama.cpp's quantizer for glm5-next (src/llama-quant.cpp of llama-cpp-python 0.3.36):
small or precision-critical tensors stay F32; some 2-D weights are never quantized (kept at f16 when the
outtype is a quantization); attn_q_a, attn_q_b, nextn.eh_proj and output are never below q8_0.
"""
from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT, LlamaFileType
from gguf.quants import quantize

OUTTYPES = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0}
FILE_TYPES = {QT.F32: LlamaFileType.ALL_F32, QT.F16: LlamaFileType.MOSTLY_F16, QT.BF16: LlamaFileType.MOSTLY_BF16,
              QT.Q8_0: LlamaFileType.MOSTLY_Q8_0, QT.Q4_0: LlamaFileType.MOSTLY_Q4_0}
AUTO = {"fp8": "bf16", "bf16": "bf16", "f16": "f16", "f32": "f32"}

# always F32, whatever the outtype
ALWAYS_F32 = ("hc_", "ssm_conv1d", "ssm_a", "ssm_dt", "ffn_gate_inp", "exp_probs_b", "indexer.proj",
              "indexer_compressor_", "_norm.", "norm.weight", "norm.bias")
# never quantized: kept at f16 when the outtype is a quantization
KEEP_HIGH = ("indexer.attn_q_b", "indexer.attn_k", "ssm_f_a", "ssm_f_b", "ssm_g_a", "ssm_g_b", "ssm_beta",
             "attn_kv_a_mqa", "attn_k_b", "attn_v_b")
# never below q8_0 (and the lm_head, as llama-quantize protects it)
Q8_FLOOR = ("attn_q_a.", "attn_q_b.", "nextn.eh_proj")


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(p in name for p in patterns)


def choose_type(name: str, shape: tuple[int, ...], base: QT) -> QT:
    """ggml type of GGUF tensor `name` (numpy `shape`) when the requested type for big weights is `base`."""
    if len(shape) == 1 or _matches(name, ALWAYS_F32):
        return QT.F32
    if base in (QT.F32, QT.F16, QT.BF16):
        return base
    if _matches(name, KEEP_HIGH):
        return QT.F16
    if _matches(name, Q8_FLOOR) or name == "output.weight":
        base = QT.Q8_0
    block = GGML_QUANT_SIZES[base][0]
    if shape[-1] % block:
        return QT.F16  # rows that are not whole quant blocks cannot be quantized (llama.cpp does the same)
    return base


def nbytes(shape: tuple[int, ...], qtype: QT) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape)) // block * size


def encode(data: np.ndarray, qtype: QT) -> np.ndarray:
    """float32 data -> the bytes ggml stores for `qtype` (gguf-py's reference quantizers)."""
    return quantize(np.ascontiguousarray(data, dtype=np.float32), qtype)
