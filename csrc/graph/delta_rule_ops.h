// KDA's gated delta rule (docs/model.md, KDA) as one CPU op of our own that gives ggml_gated_delta_net's bits, the
// state's rows kept in L1 through all of a ubatch's tokens.
#pragma once

#include <cstdint>

#include "ggml.h"

namespace glm5next {

// Whether delta_rule runs on this machine: the build has the x86 kernels (graph/cpu_arch.h), the CPU has AVX2 and
// FMA, and the op gave the very bits of ggml's own gated_delta_net (the CPU backend loaded in this process) on a
// check of random inputs, snapshots included, copying and in place (delta_rule_in_place), made once: in AVX-512's
// order of sums (16 lanes) where the CPU has AVX-512 and that order matches (ggml built for AVX-512), else in AVX2's
// (8 lanes). Where it is false, callers use ggml_gated_delta_net.
bool delta_rule_kernel_available();

// Whether delta_rule takes a head size of `head_size` values: a multiple of 32 in AVX2's order, of 64 in AVX-512's
// (ggml's vec_dot_f32 adds the values past the last 32 or 64 one by one, in an order this op does not copy; KDA's 128
// of GLM-5.3-Flash and the bench preset are, the bundled model's 48 and the test presets' 16 take ggml's op).
bool delta_rule_fits(int64_t head_size);

// ggml_gated_delta_net(ctx, q, k, v, g, beta, state, K) for KDA's per-channel gate, computed by this project's op:
// q, k, v f32 [S_v, H, T, n_seqs] with contiguous rows, g f32 [S_v, H, T, n_seqs] and beta f32 [1, H, T, n_seqs]
// contiguous, state f32 [S_v, S_v, H, n_seqs] contiguous (S_v as delta_rule_fits takes); K >= 1 snapshot slots. Returns what
// ggml's op returns, f32 [S_v * H, T * n_seqs + K * S_v * n_seqs]: the outputs, then slot 0 (the state after the
// last token), slot s (s tokens before; only the last min(T, K) are written), each [S_v, S_v, H, n_seqs].
// Each element is what ggml-cpu/ops.cpp's ggml_compute_forward_gated_delta_net computes: per token, row j of the
// state (S[:, j], contiguous) times exp(g), delta_j = (v_j - row . k) * beta, row += k * delta_j, out_j = row . q /
// sqrt(S_v). Row j's steps read only row j, so this op runs each block of rows through all the tokens before the next
// block (ggml's runs every token over the whole state four times: 4 x 64 KB a token and head at S_v = 128, from L2);
// the dots are ggml's f32 vec_dot, the products and fused multiply-adds the same per element. So a row's result
// does not depend on the sequences beside it, and equals ggml's op on another backend up to that backend's rounding.
// Measured (AMD EPYC, AVX2, 2 threads, 8 heads of 128, fastest of 5-20 runs): a 497-token prompt chunk 11.9 ->
// 6.7-7.0 ms, a decode step of 4 sequences 0.14-0.15 -> 0.10 ms (in the model, the states' reads from memory
// dominate there: even); bench preset prefill of 4 x 128 rows, the op profile's gated delta rule 108 -> ~64 ms.
// Throws std::invalid_argument naming the operand that does not fit, or when delta_rule_kernel_available is false.
// Its node is named "delta_rule" (is_delta_rule).
ggml_tensor * delta_rule(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * g,
                         ggml_tensor * beta, ggml_tensor * state, int64_t K);

// delta_rule on states kept in a cache, worked on where they are kept: `states` f32 contiguous, rows of S_v * S_v * H
// values (a cache's KDA states, graph/layer_cache.h: one cell's state per row of the engine's cells tensor, or one
// sequence's own state tensor), `cells` i32 [n_seqs]: the row of each sequence (nullptr: row s for sequence s). Each
// sequence's state is read from its row and left there after the last token, ggml_gated_delta_net's slot 0, whose
// place in the result is left unwritten; the outputs and slots 1..K-1 are delta_rule's, the same bits. The caller
// saves the gather of the states into an operand and the write of slot 0 back: both copies of every state (bench
// preset q8_0, a decode step of 4 sequences, -t 2: the op profile's GET_ROWS 2.8 ms and SET_ROWS 1.5 ms of 41, most
// of them the KDA states of 9 layers). Rows of `cells` must lie in `states` (the engine's cells: not checked at run
// time). Throws std::invalid_argument as delta_rule does, or naming states or cells when they do not fit.
ggml_tensor * delta_rule_in_place(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                  ggml_tensor * g, ggml_tensor * beta, ggml_tensor * states, ggml_tensor * cells,
                                  int64_t K);

// Whether `node` is delta_rule's (the op profile counts it apart from the other custom ops).
bool is_delta_rule(const ggml_tensor * node);

}  // namespace glm5next
