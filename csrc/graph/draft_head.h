// The NextN (MTP) draft head as a ggml graph (model.md, NextN draft head): rows (h_p, x_{p+1}) through
// eh_proj, one DSA layer with its own kpool indexer, one MoE, the shared-head norm and the trunk's lm_head.
// Its caches hold the NextN layer only.
#pragma once

#include <optional>

#include "graph/blocks.h"
#include "graph/inputs.h"
#include "graph/layer_cache.h"
#include "model/model.h"

namespace glm5next {

// Like TrunkGraph, placed at its positions by set_inputs (graph reuse, Engine).
struct DraftGraph {
    ggml_cgraph * gf = nullptr;
    GraphLayout layout;
    std::optional<InputArray> inp_hidden;           // h_p (trunk post-norm) or z of the step before
    std::optional<InputArray> inp_tokens;           // x_{p+1}
    std::optional<InputArray> inp_saved_pools;      // step 0's pools, when this step reuses them
    std::optional<InputCacheRows> inp_cache_rows;
    std::optional<InputRowScale> inp_row_scale;
    std::optional<InputKpoolRows> inp_kpool_rows;   // when the layer is on a device and selects there
    ggml_tensor * logits = nullptr;           // f32 [n_vocab, 1]: the last row
    ggml_tensor * z = nullptr;                // f32 [n_embd, 1]: the last row's post-shared-norm output
    ggml_tensor * pools = nullptr;            // i32 [n_top_pool, n_rows]: the chosen pools
    GraphParams params;

    // Fills the inputs once the graph is allocated, for rows at positions pos0.. (whose graph_layout must be
    // `layout`): hidden [n_rows, n_embd] row-major, tokens [n_rows], and saved_pools [n_top_pool] made by row
    // saved_p0 when the graph reuses a selection (both ignored otherwise).
    void set_inputs(const float * hidden, const int32_t * tokens, int64_t pos0, const int32_t * saved_pools,
                    int64_t saved_p0);
};

// Rows at positions cache.n_past .. cache.n_past+n_rows-1 of the draft cache (set_inputs places it there).
// `shared` false: each row runs the head's indexer; true (n_rows must be 1): the row attends exactly the
// selection that an earlier row made, given to set_inputs (index sharing).
// `w` is the NextN layer's weights (as stored or requantized, see DraftWeights).
void build_draft_graph(DraftGraph & g, ggml_context * ctx, const Model & model, const LayerWeights & w,
                       const CacheView & cache, int64_t n_rows, bool shared);

}  // namespace glm5next
