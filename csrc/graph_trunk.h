// The glm5next trunk as one ggml graph per ubatch (model.md, Trunk): mHC streams, KDA and DSA sparse-MLA
// attention blocks, dense/MoE FFN, stream mean + final norm + lm_head. Reads and appends the sequence's caches.
#pragma once

#include <vector>

#include "kv_cache.h"
#include "model.h"
#include "graph_blocks.h"

namespace glm5next {

// One ubatch's graph with its inputs and outputs. Holds the parameters the custom ops point to, so it must
// stay alive (and not move) until the graph has been computed.
struct TrunkGraph {
    ggml_cgraph * gf = nullptr;
    ggml_tensor * inp_tokens = nullptr;     // i32 [n_tokens]
    ggml_tensor * inp_row_scale = nullptr;  // f32 [1, n_tokens]: 0 for rows with an empty selection (no tail)
    ggml_tensor * logits = nullptr;         // f32 [n_vocab, n_out] (n_out = n_tokens or 1)
    ggml_tensor * hidden = nullptr;         // f32 [n_embd, n_tokens] post-norm hidden (the draft head's input)
    std::vector<int> dsa_layers;            // trunk DSA layers, in order
    std::vector<ggml_tensor *> selections;  // per DSA layer: i32 [n_top_pool, n_tokens] chosen pools
    std::vector<KdaSnapshots> snapshots;    // per KDA layer, when built for a verify pass
    GraphParams params;
};

// Builds into `g` the graph of `n_tokens` rows at positions cache.n_past.. of the trunk. `ctx` must be a
// no_alloc context with room for the graph. `all_logits` = false keeps only the last row's logits; `snapshots`
// keeps per-row KDA snapshots (a verify pass, whose rows may be kept only in part).
void build_trunk_graph(TrunkGraph & g, ggml_context * ctx, const Model & model, const SeqCache & cache,
                       int64_t n_tokens, bool all_logits, bool snapshots = false);

// Nodes a glm5next graph (trunk or draft head) needs at most, for sizing the context and the graph.
size_t graph_size(const Model & model);

}  // namespace glm5next
