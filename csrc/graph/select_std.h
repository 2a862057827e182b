// The indexer's choices of graph/select_ops.h built from ggml's standard ops, for DSA layers whose weights live on
// another device (which has no kernels of ours): the pools are chosen and their key rows gathered where the
// layer runs, instead of crossing to the CPU and back twice per layer.
//
// What can differ from the CPU ops (docs/model.md, Indexer): an exact tie at the top-k boundary (two candidate pools
// with bit-equal scores, e.g. exact-zero scores when every indexer head's ReLU is zero, or equal pooled keys of
// repeated text) is broken by the device's sort (ggml leaves the order of ties open) instead of toward the lower
// pool. The chosen pools come best first as on the CPU; their rows are attended in that order rather than
// ascending, which changes only the summation order. A pool that is no candidate of its row (where fewer than
// n_top_pool exist) is returned as an index the row masks, not -1: canonical_pools (select_ops.h) maps it to -1.
#pragma once

#include <cstdint>

#include "ggml.h"
#include "graph/inputs.h"

namespace glm5next {

// scores: f32 [n_pool, n_tokens]; n_cand: f32 [1, n_tokens] each row's number of candidate pools (a pool m is a
// candidate of row t iff m < n_cand[t]). Returns i32 [n_top_pool, n_tokens], best first.
ggml_tensor * kpool_top_k_std(ggml_context * ctx, ggml_tensor * scores, ggml_tensor * n_cand, int64_t n_top_pool);

// pools from kpool_top_k_std. The key rows each row attends and their mask, as kpool_rows/kpool_rows_mask give
// them (i32 [n_sel, n_tokens]; f32 [n_sel, 1, 1, n_tokens], 0 or kSelectMasked), in the pools' order, the tail
// rows last. Rows of non-candidates are clamped into [0, n_kv) and masked.
void kpool_rows_std(ggml_context * ctx, ggml_tensor * pools, const InputKpoolRows & in, int64_t kpool, int64_t n_kv,
                    ggml_tensor ** rows, ggml_tensor ** rows_mask);

// The keys of each row's tail (the incomplete pool ending at the row, docs/model.md, Indexer) in a dense pass over
// n_keys >= n_kv keys (padded: kDenseKeysPad), whose rows are the last n_tokens of the first n_kv: f32 [n_keys,
// n_tokens], 1 there, else 0. n_cand as kpool_top_k_std takes it. One per graph part: every DSA layer's mask adds it.
ggml_tensor * kpool_tail_keys_std(ggml_context * ctx, ggml_tensor * n_cand, int64_t kpool, int64_t n_kv,
                                  int64_t n_keys);

// The additive mask of a dense pass over n_keys keys (padded ones included), as kpool_mask gives it: f32 [n_keys,
// n_tokens], 0 at the rows of each row's chosen candidate pools and at its tail keys (tail: from
// kpool_tail_keys_std, nullptr without kpool_select_tail), else kSelectMasked. pools: i32 [n_top_pool, n_tokens],
// every entry below max(n_pool, n_top_pool) (kpool_top_k_std's over n_pool scores); those that are no candidate of
// their row are masked. A row with no key at all keeps a finite softmax (its output is zeroed: row_has_keys).
ggml_tensor * kpool_mask_std(ggml_context * ctx, ggml_tensor * pools, ggml_tensor * n_cand, ggml_tensor * tail,
                             int64_t kpool, int64_t n_pool, int64_t n_keys);

}  // namespace glm5next
