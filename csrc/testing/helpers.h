// Test helpers (module glm5next_runtime._testing, built with -DGLM5NEXT_TEST_HELPERS=ON): prove that we compile
// against, link to and run the ggml that llama-cpp-python ships, and run single kernels on arrays.
#pragma once

#include "ggml.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace glm5next {

// out = a @ b for row-major float32 matrices: a is m x k, b is k x n, out is
// m x n (caller-allocated). Runs a ggml graph (ggml_mul_mat) on the CPU
// backend. Throws std::invalid_argument if a dimension is < 1 and
// std::runtime_error if ggml fails to allocate or compute.
void matmul_f32(const float *a, const float *b, float *out, int64_t m, int64_t k, int64_t n);

// The mHC post-mix (graph/mhc_ops.h) on row-major arrays: x [T][n_embd], residual [T][hc][n_embd], post [T][hc],
// comb [T][s][d] (comb[t][s][d] mixes stream s into output stream d), out [T][hc][n_embd]. ggml_kernel: run
// ggml's DSV4_HC_POST instead of ours (tests compare the two). Throws like matmul_f32.
void hc_post_f32(const float *x, const float *residual, const float *post, const float *comb, float *out,
                 int64_t n_embd, int64_t hc, int64_t n_tokens, bool ggml_kernel);

// out = w[e] . x[.., t] by a few-row kernel (graph/q8_0_rows_ops.h for q8_0, graph/float_rows_ops.h for f16 and
// f32) on row-major arrays: w [n_mat][M][K] (converted to `type` here: q8_0 by ggml_quantize_chunk, f16 by
// ggml_fp32_to_fp16_row), x [T][n_x][K], ids [T][n_used] (or null: one matrix, n_used = n_x), out [T][n_used][M].
// ggml_kernel: ggml's product instead of ours (ggml_mul_mat_id with ids, else ggml_mul_mat). Throws like matmul_f32,
// std::invalid_argument for another type or a q8_0 K not a multiple of 32, and what the kernels throw.
void rows_product_f32(ggml_type type, const float *w, const float *x, const int32_t *ids, float *out, int64_t n_mat,
                      int64_t M, int64_t K, int64_t n_x, int64_t T, int64_t n_used, bool ggml_kernel);

// KDA's gated delta rule on row-major arrays (ggml's layouts reversed): q, k, v, g [B][T][H][S], beta [B][T][H],
// state [B][H][S][S] (row j of head h: S[:, j]); out [T * B * S * H + K * B * H * S * S] as the op's result (graph/
// delta_rule_ops.h). ggml_kernel: ggml_gated_delta_net instead of this project's op. `reps` > 1 runs the graph that
// many times (for timing; the result is the last run's). Threads: n_threads. Returns the fastest run's seconds.
double delta_rule_f32(const float *q, const float *k, const float *v, const float *g, const float *beta,
                      const float *state, float *out, int64_t S, int64_t H, int64_t T, int64_t B, int64_t K,
                      bool ggml_kernel, int reps, int n_threads);

// delta_rule_in_place (graph/delta_rule_ops.h) on the same arrays, the states kept in `states` [n_rows][H][S][S]:
// sequence s's in row cells[s] (cells null: row s), written back there after the last token. out as delta_rule_f32's
// (slot 0 as the op leaves it: unwritten). Two threads. Throws std::invalid_argument for a cell
// outside the rows or shapes the op refuses.
void delta_rule_in_place_f32(const float *q, const float *k, const float *v, const float *g, const float *beta,
                             float *states, int64_t n_rows, const int32_t *cells, float *out, int64_t S, int64_t H,
                             int64_t T, int64_t B, int64_t K);

// The pieces joined along ggml dimension `dim` (0..3) by concat_f32 (graph/concat_ops.h), or by ggml_concat's chain
// (ggml_kernel), on n_threads: piece p's data at pieces[p], ggml sizes ne[p] (ne0 first; row-major arrays reversed);
// a piece with transposed[p] is stored with its ne0 and ne1 swapped and joined through ggml_transpose (rows that
// are not contiguous). out: the result's values, contiguous. Throws what concat_f32 throws, std::runtime_error
// when ggml fails.
void concat_pieces_f32(const std::vector<const float *> & pieces, const std::vector<std::array<int64_t, 4>> & ne,
                       const std::vector<bool> & transposed, int dim, float * out, bool ggml_kernel, int n_threads);

// RMSNorm (rms_norm_f32, graph/norm_ops.h; w nullptr: no weight) or, with l2, KDA's L2 normalization (l2_norm_f32)
// of x's rows, or the same by ggml's RMS_NORM, MUL and SCALE (ggml_kernel), on n_threads: x contiguous with ggml
// sizes ne (ne0 first), read through a view whose rows are row_stride values apart (>= ne[0]: rows that are not
// contiguous with each other), w nullptr or n_w values (the op refuses n_w != ne[0]). out: ne's values, contiguous.
// Throws what the op throws, std::runtime_error when ggml fails.
void norm_rows_f32(const float * x, const std::array<int64_t, 4> & ne, int64_t row_stride, const float * w, int64_t n_w,
                   float eps, bool l2, float * out, bool ggml_kernel, int n_threads);

// Two graphs of one slot (runtime/graph_slot.h, one CPU backend), run in turn on x [n]: first
// a = 2 * ((2x * 3) * 5) (each tensor used once: ggml's allocator may compute each step in the place of the one
// before), then b = 2x + (2x * 3) * 5 (2x lives until the end), whose graphs have as many nodes and leafs as a's, of
// the same sizes. Writes a into out_a and b into out_b (n floats each). Throws std::runtime_error when ggml fails.
void one_slot_two_graphs(const float *x, float *out_a, float *out_b, int64_t n);

}  // namespace glm5next
