// Products of a q8_0 matrix with a few rows as one CPU op of our own, each element bit for bit what ggml's vec_dot
// gives the row alone (issue 24: the rows of several sequences; issue 15: verify passes), several times faster.
#pragma once

#include "ggml.h"

namespace glm5next {

// Whether q8_0_mul_mat_rows runs on this machine: the build has the x86 kernels (graph/cpu_arch.h: false off
// x86-64 or with GLM5NEXT_NO_X86_KERNELS), the CPU has AVX-512 F/BW/VL/VNNI or else AVX2 with FMA and F16C (one
// kernel each), and that kernel gave the very bits of ggml's own q8_0 vec_dot (the CPU backend loaded in this
// process, whatever its build) on a check of random rows, made once. Where it is false, callers use ggml's ops
// (BlockBuilder::mm, BlockBuilder::moe).
bool q8_0_rows_kernel_available();
// Which of the two kernels that is: "avx512vnni" or "avx2" ("" where none runs). AVX2's on an AVX-512 CPU too with
// GLM5NEXT_CPU_KERNELS=avx2 (graph/cpu_arch.h). Throws std::invalid_argument for a bad value of that variable.
const char * q8_0_rows_kernel_isa();

// The product of q8_0 matrices with f32 rows, as ggml's CPU backend computes it one row at a time:
//   ids given:  out[:, j, t] = w[:, :, ids[j, t]] . x[:, j % x->ne[1], t]   (ggml_mul_mat_id: the routed experts)
//   ids null:   out[:, j, t] = w . x[:, j, t]                              (ggml_mul_mat of one matrix)
// w q8_0 [K, M] or [K, M, n_expert] (contiguous; K a multiple of 32); x f32 [K, n, T] with contiguous rows; ids i32
// [n_used, T]; returns f32 [M, n_used or n, T].
// Each element equals ggml_vec_dot_q8_0_q8_0 of the weight row and the activation row quantized by ggml's q8_0
// from_float (ggml-cpu/arch/x86/quants.c): the same 8-lane sums of four int8 products, fused multiply-adds by
// d_w * d_x per block in block order, and hsum_float_8's order at the end. So a row's result does not depend on
// the rows it is multiplied with, or on whether ggml_mul_mat or ggml_mul_mat_id multiplies it alone.
// Why: ggml multiplies a few rows through mul_mat_id row by row, one vec_dot per element (tinyBLAS, ggml's kernel
// for several rows, rounds otherwise; BlockBuilder::mm), loading and widening each weight block again for every
// row. This kernel does it once per block for up to 8 rows (two per 512-bit register with AVX-512 VNNI, one per
// 256-bit one with AVX2). Measured numbers: BlockBuilder::mm's comment.
// Throws std::invalid_argument naming the operand whose type or shape does not fit.
// Up to 16 rows of x are quantized by each thread of the op itself; more, by a copy node before it (ggml's threads).
// Its node is named "q8_0_rows" (is_q8_0_rows: the op profile counts it apart from the other custom ops).
ggml_tensor * q8_0_mul_mat_rows(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids);

// Whether `node` is a product of q8_0_mul_mat_rows.
bool is_q8_0_rows(const ggml_tensor * node);

}  // namespace glm5next
