// Products of an f16 or f32 matrix with a few rows as one CPU op of our own, each element bit for bit what ggml's
// vec_dot gives the row alone: the f16 and f32 counterpart of graph/q8_0_rows_ops.h (issue 24: the rows of several
// sequences; issue 15: verify passes and draft steps). The f16 matrices are MLA's kv_a and k_b (per head), the
// indexer's keys and q_b, KDA's f/g/beta projections; the f32 ones the router, mHC's and the indexer's small
// projections (BlockBuilder::mm; v_b is applied by ggml_mul_mat over the attention's output, not through mm).
#pragma once

#include "ggml.h"

namespace glm5next {

// Whether float_mul_mat_rows runs on this machine for weights of `type` (f16 or f32; false for any other): the build
// has the x86 kernels (graph/cpu_arch.h: false off x86-64 or with GLM5NEXT_NO_X86_KERNELS), the CPU has AVX2 with
// F16C and FMA, and the kernel of its instruction set (float_rows_kernel_isa) gave the very bits of ggml's own
// vec_dot of that type (the CPU backend loaded in this process, whatever its build) on a check of random rows, made
// once per type. Where it is false, callers use ggml's ops (BlockBuilder::mm).
bool float_rows_kernel_available(ggml_type type);

// The instruction set of the kernel that runs here for weights of `type`: "avx512f" where the CPU has AVX-512 F
// (unless GLM5NEXT_CPU_KERNELS=avx2: graph/cpu_arch.h), "avx2" on other CPUs with AVX2, FMA and F16C, each only
// where it gives ggml's bits (ggml built for the CPU it runs on sums as that CPU's kernel does: the AVX2 kernel does
// not match an AVX-512 ggml, so GLM5NEXT_CPU_KERNELS=avx2 on an AVX-512 CPU leaves ggml's ops); "" where none runs.
const char * float_rows_kernel_isa(ggml_type type);

// Whether a weight of w's type and shape can take float_mul_mat_rows: f16 of any row length; f32 whose rows are a
// multiple of 64 values long (vec_dot_f32 adds the values past the last 64 in float, where the compiler of ggml
// may or may not fuse the multiply and the add: such rows keep ggml's op).
bool float_rows_fit(const ggml_tensor * w);

// The product of f16 or f32 matrices with f32 rows, as ggml's CPU backend computes it one row at a time:
//   ids given:  out[:, j, t] = w[:, :, ids[j, t]] . x[:, j % x->ne[1], t]   (ggml_mul_mat_id)
//   ids null:   out[:, j, t] = w . x[:, j, t]                              (ggml_mul_mat of one matrix)
// w f16/f32 [K, M] or [K, M, n_mat] (contiguous; float_rows_fit); x f32 [K, n, T] with contiguous rows; ids i32
// [n_used, T]; returns f32 [M, n_used or n, T].
// Each element equals ggml_vec_dot_f16 (x rounded to f16 by ggml's from_float, as ggml_mul_mat converts it) or
// ggml_vec_dot_f32 (ggml-cpu/vec.cpp): four accumulators of 16 lanes (AVX-512 F) or 8 (AVX2) over steps of 64 or 32
// values, fused multiply-adds, the accumulators added as GGML_F32x16_REDUCE adds them (0+2, 1+3, then 0+1, then
// _mm512_reduce_add_ps) or GGML_F32x8_REDUCE (the same, then two horizontal adds); an f16 row's values past the last
// step added one by one in double. So a row's result does
// not depend on the rows it is multiplied with. Why: ggml multiplies a few rows through mul_mat_id row by row (one
// vec_dot per element, widening each f16 weight again for every row: BlockBuilder::mm); this loads and widens each
// weight row once for up to 4 rows. Measured numbers: BlockBuilder::mm's comment.
// Throws std::invalid_argument naming the operand whose type or shape does not fit, or when the kernel does not
// run here (float_rows_kernel_available). Its node is named "f16_rows" or "f32_rows" (is_float_rows).
ggml_tensor * float_mul_mat_rows(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids);

// Whether `node` is a product of float_mul_mat_rows.
bool is_float_rows(const ggml_tensor * node);

}  // namespace glm5next
