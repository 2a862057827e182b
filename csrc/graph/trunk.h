// The glm5next trunk as one ggml graph per ubatch (model.md, Trunk): mHC streams, KDA and DSA sparse-MLA
// attention blocks, dense/MoE FFN, stream mean + final norm + lm_head. Reads and appends the sequence's caches.
#pragma once

#include <optional>
#include <vector>

#include "graph/blocks.h"
#include "graph/inputs.h"
#include "graph/layer_cache.h"
#include "model/model.h"

namespace glm5next {

// One ubatch's graph with its inputs and outputs. Holds the parameters the custom ops point to, so it must
// stay alive (and not move) until the graph has been computed. The graph depends on the rows' positions only
// through `layout`: set_inputs places it at any n_past with that layout (graph reuse, Engine).
struct TrunkGraph {
    ggml_cgraph * gf = nullptr;
    GraphLayout layout;
    std::optional<InputArray> inp_tokens;      // i32 [n_tokens]
    std::optional<InputCacheRows> inp_cache_rows;
    std::optional<InputRowScale> inp_row_scale;
    std::optional<InputKpoolRows> inp_kpool_rows;  // when a layer on a device made its selection there
    ggml_tensor * logits = nullptr;         // f32 [n_vocab, n_out] (n_out = n_tokens or 1)
    ggml_tensor * hidden = nullptr;         // f32 [n_embd, n_tokens] post-norm hidden (the draft head's input)
    std::vector<int> dsa_layers;            // trunk DSA layers, in order
    std::vector<ggml_tensor *> selections;  // per DSA layer: i32 [n_top_pool, n_tokens] chosen pools
    std::vector<KdaSnapshots> snapshots;    // per KDA layer, when built for a verify pass
    GraphParams params;

    // Fills the inputs once the graph is allocated, for rows at positions n_past.. (whose graph_layout must be
    // `layout`): `tokens` holds the ubatch's n_tokens ids.
    void set_inputs(const int32_t * tokens, int64_t n_past);
};

// Builds into `g` the graph of `n_tokens` rows at positions cache.n_past.. of the trunk (set_inputs places it
// there). `ctx` must be a no_alloc context with room for the graph. `all_logits` = false keeps only the last row's logits; `snapshots`
// keeps per-row KDA snapshots (a verify pass, whose rows may be kept only in part).
void build_trunk_graph(TrunkGraph & g, ggml_context * ctx, const Model & model, const CacheView & cache,
                       int64_t n_tokens, bool all_logits, bool snapshots = false);

}  // namespace glm5next
