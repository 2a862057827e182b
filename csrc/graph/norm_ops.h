// RMSNorm and L2 normalization of f32 rows as one CPU op of our own: ggml's arithmetic, its sum vectorized.
#pragma once

#include <cmath>
#include <cstdint>

#include "ggml.h"

namespace glm5next {

// Per row of x: y = x * (1 / sqrtf(mean + *eps)) * w, mean = the squares' sum / n0 (RMSNorm, docs/model.md; w
// nullptr: no weight), with ggml-cpu's arithmetic (ops.cpp, ggml_compute_forward_rms_norm_f32, then ggml_mul or its
// fused RMS_NORM + MUL): each square rounded to f32 and summed in f64, the mean rounded to f32, x * scale then * w each
// rounded to f32. x f32 [n0, n1, n2, n3] with contiguous rows (nb[0] = 4, any row strides: a view such as KDA's
// per-head q or the rows of its recurrence's packed result); w nullptr or f32 [n0] contiguous; eps a value that
// outlives every graph holding the node (hparams' rms_eps). Returns f32 [n0, n1, n2, n3], contiguous.
// Why not ggml's op: it sums the squares value by value into one f64, a dependent add per value (4 cycles each on the
// AMD EPYC measured); this op sums them over 16 f64 lanes (AVX2 where the CPU has it; value by value elsewhere). The
// f64 sums differ from ggml's in their last bits only, so the f32 mean is ggml's but where a sum lies within an f64
// rounding of an f32 rounding boundary (about once in 2^29 rows): the devices' ggml ops and this op agree bit for bit
// in practice (tests/csrc/test_devices.py holds placed models to the CPU's logits at 1e-5). A row's bits depend on its
// own values alone (batch invariance, docs/runtime.md). Measured (bench preset q8_0, AMD EPYC, AVX2, -t 2, op
// profile, each node alone): RMS_NORM took 20.4 ms of a 214-row prompt chunk's 564 (82 nodes).
// Throws std::invalid_argument naming the operand that is not f32, has rows that are not contiguous or does not fit.
ggml_tensor * rms_norm_f32(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, const float * eps);

// KDA's L2 normalization of rows of n values (docs/model.md, KDA: x / sqrt(sum x^2 + 1e-6)) as RMSNorm computes it:
// rms_norm(x, eps = l2_norm_eps(n)) * l2_norm_scale(n). ggml's ops and l2_norm_f32 take these two constants.
inline float l2_norm_eps(int64_t n) { return 1e-6f / (float) n; }
inline float l2_norm_scale(int64_t n) { return 1.0f / std::sqrt((float) n); }

// Per row of x: rms_norm_f32(x, nullptr, l2_norm_eps(n0)) * l2_norm_scale(n0), each product rounded to f32 as ggml's
// RMS_NORM then SCALE round them. x as rms_norm_f32's.
ggml_tensor * l2_norm_f32(ggml_context * ctx, ggml_tensor * x);

}  // namespace glm5next
