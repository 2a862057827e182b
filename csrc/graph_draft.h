// The NextN (MTP) draft head as a ggml graph (model.md, NextN draft head): rows (h_p, x_{p+1}) through
// eh_proj, one DSA layer with its own kpool indexer, one MoE, the shared-head norm and the trunk's lm_head.
// Its caches hold the NextN layer only.
#pragma once

#include "graph_blocks.h"

namespace glm5next {

struct DraftGraph {
    ggml_cgraph * gf = nullptr;
    ggml_tensor * inp_hidden = nullptr;       // f32 [n_embd, n_rows]: h_p (trunk post-norm) or z of the step before
    ggml_tensor * inp_tokens = nullptr;       // i32 [n_rows]: x_{p+1}
    ggml_tensor * inp_saved_pools = nullptr;  // i32 [n_top_pool, 1]: step 0's pools, when this step reuses them
    ggml_tensor * inp_row_scale = nullptr;    // f32 [1, n_rows], only without kpool_select_tail
    ggml_tensor * logits = nullptr;           // f32 [n_vocab, 1]: the last row
    ggml_tensor * z = nullptr;                // f32 [n_embd, 1]: the last row's post-shared-norm output
    ggml_tensor * pools = nullptr;            // i32 [n_top_pool, n_rows]: the chosen pools
    GraphParams params;
};

// Rows at positions pos0 .. pos0+n_rows-1 of the draft cache. saved_p0 < 0: each row runs the head's indexer;
// saved_p0 >= 0 (n_rows must be 1): the row attends exactly the selection that row saved_p0 made (index sharing).
// `w` is the NextN layer's weights (as stored or requantized, see DraftWeights).
void build_draft_graph(DraftGraph & g, ggml_context * ctx, const Model & model, const LayerWeights & w,
                       const SeqCache & cache, int64_t pos0, int64_t n_rows, int64_t saved_p0);

}  // namespace glm5next
