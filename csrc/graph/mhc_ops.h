// mHC (manifold-constrained hyper-connections; docs/model.md, "Trunk, one layer", steps 1 and 3) kernels of our own
// where ggml's are slow or cost many graph nodes.
#pragma once

#include "ggml.h"

namespace glm5next {

// Whether hc_pre_mix and hc_post_mix give ggml_dsv4_hc_pre's and ggml_dsv4_hc_post's bits here: they sum each
// product into the output as ggml's CPU kernels do, fused (FMA) or rounded first, as asked of ggml once (a build for
// a CPU with FMA fuses). False when neither form does: then the graphs use ggml's ops (BlockBuilder::hc_pre, hc_post).
bool hc_mix_kernels_available();

// The mHC pre-mix (block input), the same math as ggml_dsv4_hc_pre:
//   out[:, t] = sum_s x[:, s, t] * pre[s, t]   (s in order 0..hc-1)
// x f32 [n_embd, hc, T] with contiguous rows; pre f32 [hc, T] (any strides). Returns f32 [n_embd, T]. Row-wise
// for the reason given at hc_post_mix (ggml's kernel divides twice per output element). Throws
// std::invalid_argument for operands that do not fit, or where hc_mix_kernels_available is false.
ggml_tensor * hc_pre_mix(ggml_context * ctx, ggml_tensor * x, ggml_tensor * pre);

// The mHC post-mix, the same math as ggml_dsv4_hc_post (llama.cpp's glm5-next graph uses that op):
//   out[:, d, t] = x[:, t] * post[d, t] + sum_s residual[:, s, t] * comb[d, s, t]   (s in order 0..hc-1)
// x f32 [n_embd, T]; residual f32 [n_embd, hc, T]; post f32 [hc, T]; comb f32 [hc (d), hc (s), T] (nb[0] may be
// any stride). Returns f32 [n_embd, hc, T]. Rows (dim 0) of x, residual must be contiguous. Throws
// std::invalid_argument as hc_pre_mix.
// Why not ggml's: its CPU kernel does three 64-bit divisions and strided loads per output element; here one task
// computes whole rows with unit-stride loops (the demo model's decode spent ~16% of its time in that op).
ggml_tensor * hc_post_mix(ggml_context * ctx, ggml_tensor * x, ggml_tensor * residual, ggml_tensor * post,
                      ggml_tensor * comb);

// The mHC pre and post gates of one mHC pre step, in one op instead of eight compute nodes:
//   pre[d, t]  = sigmoid(mixes[d, t] * scale[0] + base[d]) + eps
//   post[d, t] = 2 * sigmoid(mixes[hc + d, t] * scale[1] + base[hc + d])
// mixes f32 [>= 2*hc, T] (rows 2hc.. are the comb part, left to ggml_dsv4_hc_comb); scale f32 [>= 2];
// base f32 [>= 2*hc]; eps must outlive the graph (the model's hparams do). Returns f32 [2*hc, T]: pre in rows
// 0..hc-1, post in rows hc..2hc-1. Fewer nodes matter on small models, where each node costs a thread barrier.
ggml_tensor * hc_gates(ggml_context * ctx, ggml_tensor * mixes, ggml_tensor * scale, ggml_tensor * base, int64_t hc,
                       const float * eps);

}  // namespace glm5next
