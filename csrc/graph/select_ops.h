// Discrete choices of the glm5next graph as ggml custom ops (CPU): the kpool indexer's top-k pools, the
// sparse-attention mask they imply, and MoE routing. ggml's own top-k leaves ties to std::partial_sort; these
// break an exact tie toward the LOWER index (docs/model.md, Indexer), so selections are reproducible and comparable.
#pragma once

#include <cstdint>

#include "ggml.h"

namespace glm5next {

// Parameters shared by the indexer ops of one ubatch. Must outlive the graph computation.
struct KpoolParams {
    int64_t n_past = 0;       // position of the ubatch's first row
    int64_t kpool = 4;
    int64_t n_top_pool = 0;   // index_topk / kpool
    bool select_tail = true;
};

// scores: f32 [n_pool, n_tokens] (pool m of row t is a candidate iff its last row (m+1)*kpool-1 <= n_past+t).
// Returns i32 [n_top_pool, n_tokens]: the chosen pools, best first, -1 where fewer candidates exist.
ggml_tensor * kpool_top_k(ggml_context * ctx, ggml_tensor * scores, const KpoolParams * p);

// sel: i32 [n_top_pool, n_tokens] from kpool_top_k. Returns f32 [n_kv, n_tokens] additive attention mask
// (0 = attend, -inf = not): the rows of the chosen pools plus, with select_tail, the incomplete pool ending at
// the query row. A row with an empty selection unmasks key 0 so that softmax stays finite; its output is then
// zeroed by the caller (row_has_keys).
ggml_tensor * kpool_mask(ggml_context * ctx, ggml_tensor * sel, int64_t n_kv, const KpoolParams * p);

// sel as kpool_top_k gives it. The key rows each query row attends, for attention over gathered rows (small
// ubatches): i32 [n_sel, n_tokens] in ascending order, n_sel = n_top_pool*kpool + (select_tail ? kpool-1 : 0),
// unused slots pointing at row 0; and f32 [n_sel, 1, 1, n_tokens] with 0 for used slots, -inf for unused ones
// (a row with an empty selection keeps slot 0 at 0, see kpool_mask).
ggml_tensor * kpool_rows(ggml_context * ctx, ggml_tensor * sel, const KpoolParams * p);
ggml_tensor * kpool_rows_mask(ggml_context * ctx, ggml_tensor * sel, const KpoolParams * p);

// A key masked by the masks built from ggml's standard ops (graph/select_std.h): finite, so that a row with no
// key at all (possible without kpool_select_tail) keeps a finite softmax (its output is then zeroed, see
// row_has_keys); beside any unmasked key its exp underflows to exactly 0, as -inf does.
constexpr float kSelectMasked = -1e30f;

// Number of candidate pools of row t (at position n_past+t): the complete ones, (n_past+t+1) / kpool.
int64_t n_candidates(const KpoolParams & p, int64_t t);

// Sets to -1 every entry of row t's chosen pools (n_pools of them) that is no candidate of the row. The CPU op
// writes -1 there itself; a device top-k returns masked pools (graph/select_std.h). Applied where pools are read
// back, so that callers see one form.
void canonical_pools(const KpoolParams & p, int32_t * pools, int64_t n_pools, int64_t t);

// The key rows that row t (at position n_past+t) attends given its n_pools chosen pools (-1 = none), ascending:
// the chosen pools' rows plus, with select_tail, the incomplete pool ending at the row (docs/model.md, Indexer). Writes
// them to `out` (room for n_pools*kpool + kpool-1) and returns how many. Entries that are no candidate of the row
// are skipped as -1 is. The one definition every attention path
// and the inspection API use.
int64_t selected_rows(const KpoolParams & p, const int32_t * pools, int64_t n_pools, int64_t t, int32_t * out);

// Whether row t (at position n_past+t) selects at least one key: with the tail on always; without it only once
// a complete pool exists.
bool row_has_keys(const KpoolParams & p, int64_t t);

struct MoeRouteParams {
    int64_t n_expert_used = 8;
    int64_t n_group = 1, n_group_used = 1;
    bool norm = true;
    float scale = 1.0f;
};

// logits: f32 [n_expert, n_tokens] router logits; bias: f32 [n_expert] e_score_correction_bias.
// Sigmoid scores s; choose by s + bias within the n_group_used best groups (group score = sum of its top 2);
// weights = chosen s, normalized (+1e-20) if norm, times scale. Returns f32 [2*n_expert_used, n_tokens]: expert
// ids (as exact floats) then their weights.
ggml_tensor * moe_route(ggml_context * ctx, ggml_tensor * logits, ggml_tensor * bias, const MoeRouteParams * p);

}  // namespace glm5next
