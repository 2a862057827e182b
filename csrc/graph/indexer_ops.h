// The kpool indexer's head-weighted scores (docs/model.md, Indexer) as one CPU op of our own, where ggml's composition
// makes several passes over the largest tensor a prompt ubatch has at depth.
#pragma once

#include "ggml.h"

namespace glm5next {

// The indexer's score of every pool for every row, from the per-head dot products:
//   scores[p, t] = sum_h relu(kq[p, t, h] * scale) * w[h, t]   (h in order 0..n_head-1)
// kq f32 [n_pool, T, n_head] contiguous (pooled keys . queries); w f32 [n_head, T] (the head weights, any strides);
// `scale` (1/sqrt(index_head_dim)) must outlive the graph. Returns f32 [n_pool, T].
// Why not ggml's ops (scale, relu, a permuted copy and a batched matmul of one column per row): at depth kq is the
// largest tensor of a prompt ubatch (bench preset, depth 16384: 4096 pools x 512 rows x 16 heads, 128 MiB per DSA
// layer) and they read or write it seven times; this op reads it once, row by row, each task its own rows t. The
// sum runs over heads in order, so a row's scores do not depend on the ubatch (batch-invariant verify passes).
ggml_tensor * indexer_scores(ggml_context * ctx, ggml_tensor * kq, ggml_tensor * w, const float * scale);

}  // namespace glm5next
