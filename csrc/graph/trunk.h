// The glm5next trunk as one ggml graph per ubatch (docs/model.md, Trunk): mHC streams, KDA and DSA sparse-MLA
// attention blocks, dense/MoE FFN, stream mean + final norm + lm_head. A ubatch holds the rows of one or more
// sequences (graph/parts.h), each reading and appending its own caches.
#pragma once

#include <optional>
#include <vector>

#include "graph/blocks.h"
#include "graph/inputs.h"
#include "graph/layer_cache.h"
#include "graph/parts.h"
#include "model/model.h"

namespace glm5next {

// One sequence's rows in a trunk ubatch: its caches (at their n_past), how many rows, and what it keeps of them.
struct TrunkRows {
    CacheView cache;
    int64_t n_rows = 0;
    bool all_logits = false;  // logits of every row (else of the last)
    bool snapshots = false;   // per-row KDA snapshots: a verify pass, whose rows may be kept only in part
};

// One ubatch's graph with its inputs and outputs. Holds the parameters the custom ops point to, so it must
// stay alive (and not move) until the graph has been computed. The graph depends on the rows' positions only
// through each part's layout: set_inputs places it at any n_past with those layouts (graph reuse, Engine).
struct TrunkGraph {
    ggml_cgraph * gf = nullptr;
    GraphParts parts;                          // one per sequence, in row order (selections, snapshots)
    std::optional<InputArray> inp_tokens;      // i32 [n_rows]: every part's tokens, in row order
    std::vector<ggml_tensor *> hidden;         // per group: f32 [n_embd, its rows] post-norm hidden (the draft head's input)
    std::vector<ggml_tensor *> logits;         // per group: f32 [n_vocab, its output rows] (GraphPart::n_out, out_row0)
    std::vector<int> dsa_layers;               // trunk DSA layers, in order
    GraphParams params;

    // Fills the inputs once the graph is allocated: `tokens` holds every part's ids in row order, n_past[i] is part
    // i's position (its graph_layout must be the part's layout).
    void set_inputs(const int32_t * tokens, const std::vector<int64_t> & n_past);
};

// Whether a trunk ubatch of several sequences' rows is one row group (graph/parts.h): where a trunk layer multiplies
// on a GPU backend (model/kernel_limits.h, multiplies_rows_alone), whose products keep no row's bits alone anyway,
// every sequence's rows, prompts included, pass the blocks without caches at once (each weight read once per step,
// as llama.cpp's ubatch of several sequences; a prompt step of B sequences was B passes). On the CPU and plain RPC a
// prompt part longer than kGatherMaxRows keeps a group of its own and the products it has alone (batch invariance).
bool trunk_in_one_pass(const Model & model);

// Builds into `g` the graph of `rows` (one entry per sequence, at most one ubatch each; each sequence's caches at
// their n_past, set_inputs places them). Parts of at most kGatherMaxRows rows must come first (one few-row group),
// longer ones after (a group each, or all in one where trunk_in_one_pass). `ctx` must be a no_alloc context with
// room for graph_size(hp, rows.size()) nodes.
void build_trunk_graph(TrunkGraph & g, ggml_context * ctx, const Model & model, const std::vector<TrunkRows> & rows);

}  // namespace glm5next
