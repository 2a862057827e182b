// The NextN (MTP) draft head as a ggml graph (docs/model.md, NextN draft head): rows (h_p, x_{p+1}) through
// eh_proj, one DSA layer with its own kpool indexer, one MoE, the shared-head norm and the trunk's lm_head.
// Its caches hold the NextN layer only. A graph holds the rows of one or more sequences (graph/parts.h).
#pragma once

#include <optional>
#include <vector>

#include "graph/blocks.h"
#include "graph/inputs.h"
#include "graph/layer_cache.h"
#include "graph/parts.h"
#include "model/model.h"

namespace glm5next {

// One sequence's rows in a draft-head graph: its NextN cache (at its n_past), how many rows, and whether it wants
// the last row's answer.
struct DraftRows {
    CacheView cache;
    int64_t n_rows = 0;
    // false: each row runs the head's indexer; true (n_rows must be 1): the row attends exactly the selection an
    // earlier row made, given to set_inputs (index sharing)
    bool shared = false;
    // the last row's logits, z and pools are computed (a draft step); false: the rows are only written (rows
    // deferred by rounds without drafts, a prompt's rows)
    bool output = true;
};

// Like TrunkGraph, placed at its positions by set_inputs (graph reuse, Engine).
struct DraftGraph {
    ggml_cgraph * gf = nullptr;
    GraphParts parts;                               // one per sequence, in row order
    std::optional<InputArray> inp_hidden;           // h_p (trunk post-norm) or z of the step before, every row
    std::optional<InputArray> inp_tokens;           // x_{p+1}, every row
    std::vector<std::optional<InputArray>> inp_saved_pools;  // per part: step 0's pools, when it reuses them
    std::vector<ggml_tensor *> logits;  // per group: f32 [n_vocab, its output rows] (one per part with output)
    std::vector<ggml_tensor *> z;       // per group: f32 [n_embd, its output rows]: post-shared-norm outputs
    // per part: the chosen pools i32 [n_top_pool, rows] (null when shared), the part's from column row0 on (its
    // own, or its group's where the group selected at once: BlockBuilder::attends_at_once)
    std::vector<GraphPart::Selected> pools;
    GraphParams params;

    // Fills the inputs once the graph is allocated: hidden [n_rows, n_embd] row-major and tokens [n_rows] of every
    // part in row order; per part i its first row's position pos0[i] (whose graph_layout must be the part's) and,
    // for a part that reuses a selection, saved_pools[i] [n_top_pool] made by row saved_p0[i] (ignored otherwise).
    void set_inputs(const float * hidden, const int32_t * tokens, const std::vector<int64_t> & pos0,
                    const std::vector<const int32_t *> & saved_pools, const std::vector<int64_t> & saved_p0);

private:
    // The position part p (the i-th) selects at: the row that made its reused selection, else its own rows.
    const KpoolParams & selected_at(const GraphPart & p, size_t i) const;
};

// Builds the graph of `rows` (one entry per sequence; few-row parts first, as build_trunk_graph). `w` is the NextN
// layer's weights (as stored or requantized, see DraftWeights).
void build_draft_graph(DraftGraph & g, ggml_context * ctx, const Model & model, const LayerWeights & w,
                       const std::vector<DraftRows> & rows);

}  // namespace glm5next
