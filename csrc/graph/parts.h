// The rows of several sequences in one graph (docs/runtime.md, Multi-sequence: one engine serves all slots; a step
// runs the rows of every active sequence in one graph, with shared matmuls and per-sequence attention, indexer and
// KDA). A graph's rows are cut into row groups and each group into parts, one part per sequence:
//   - a part is one sequence's consecutive rows: its own caches, positions, indexer choices and KDA state;
//   - a group is what the blocks that read no cache (norms, matmuls, mHC, MoE, the output layer) run over at once:
//     every part of at most kGatherMaxRows rows (decode rows, verify passes, draft steps, short prompt chunks) in
//     one "few-row" group, and each longer part (a prompt chunk) in a group of its own; or every part in one group
//     where the graph's layers multiply on a GPU backend (trunk_in_one_pass, graph/trunk.h: one pass over every
//     sequence's rows, prompts included, each weight read once per step).
// Why groups: a row's result must not depend on what it is batched with (issue 15's batch invariance, issue 24).
// ggml's CPU matmul multiplies one column with its vec_dot kernel and several with llamafile's tinyBLAS, which
// rounds differently; a few-row group multiplies every row with the vec_dot kernel whatever its size
// (BlockBuilder::mm), exactly as the part's rows alone would be, and a long part keeps the tinyBLAS product it has
// alone. Everything per sequence (graph/blocks.cpp) sees the part's own rows, with the shapes it has alone; on a GPU
// backend a DSA layer selects and attends for a group's parts at once where they allow it (selects_at_once: one
// node set per layer, as llama.cpp's graph for this model builds, instead of one per sequence).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "ggml.h"
#include "graph/inputs.h"
#include "graph/layer_cache.h"
#include "graph/select_ops.h"

namespace glm5next {

// What a ubatch's graph structure depends on besides its row count and the graph's flags: n_past enters only
// through it and through inputs set per ubatch (InputCacheRows, the custom ops' KpoolParams), so that equal
// layouts share one graph (Engine's graph reuse; llama.cpp's llm_graph_result::can_reuse).
struct GraphLayout {
    int64_t n_kv = 0;    // keys of the masked dense pass (n_past + n_rows); 0: each row gathers its selected keys
    int64_t n_pool = 1;  // pooled keys the indexer scores: the complete pools, rounded up to kPoolBucket (>= 1)
    bool operator==(const GraphLayout & o) const { return n_kv == o.n_kv && n_pool == o.n_pool; }
};

// One sequence's rows in a graph. The custom ops point to its KpoolParams: a part must not move once built
// (GraphParts keeps them in a deque).
struct GraphPart {
    CacheView cache;          // the sequence's caches (n_past: where the graph is built; set_input places it)
    int64_t n_rows = 0;
    GraphLayout layout;
    int64_t row0 = 0;         // its first row within its group
    int64_t n_out = 0;        // rows whose output (logits; the draft head's z) the graph computes: its last n_out rows
    int64_t out_row0 = 0;     // its first output row within its group's outputs
    KpoolParams kpool;        // its rows (n_past set per run)
    KpoolParams kpool_saved;  // draft head: the row that made a reused selection
    std::optional<InputCacheRows> cache_rows;  // where its rows go in its own caches (cache_rows_input)
    std::optional<InputKpoolRows> kpool_rows;  // when a layer on another device selects with ggml's standard ops
    ggml_tensor * tail_keys = nullptr;         // and attends densely: its rows' tail keys (kpool_tail_keys_std)
    bool keep_snapshots = false;               // a verify pass of several rows: per-row KDA snapshots
    std::vector<KdaSnapshots> snapshots;       // per KDA layer, with keep_snapshots
    // trunk: per DSA layer, the chosen pools i32 [n_top_pool, rows]: the part's rows from column row0 on (0 for a
    // part's own selection, its row0 in its group for a group's: BlockBuilder::dsa, selects_at_once)
    struct Selected {
        ggml_tensor * pools = nullptr;
        int64_t row0 = 0;
    };
    std::vector<Selected> selections;

    // Its InputCacheRows, created at the first call (a graph whose layers write the part's rows through its cells
    // has none: an input no node reads gets no buffer).
    InputCacheRows & cache_rows_input(ggml_context * ctx) {
        if (!cache_rows) cache_rows.emplace(ctx, n_rows);
        return *cache_rows;
    }
};

// Consecutive rows of the graph that the blocks without caches run over at once: parts of at most kGatherMaxRows
// rows together (`few`), a longer part alone.
struct RowGroup {
    std::vector<GraphPart *> parts;
    int64_t row0 = 0;    // its first row in the graph
    int64_t n_rows = 0;
    bool few = true;
    int64_t n_out = 0;                       // output rows of its parts
    std::optional<InputRowScale> row_scale;  // rows that select no key (without kpool_select_tail)
    std::optional<InputArray> out_rows;      // i32 [n_out]: the output rows, when they are not its rows or last row
    std::optional<InputCells> cells;         // where its rows go in the engine's cells (over_cells)
    std::optional<InputKpoolRows> kpool_rows;  // its rows' candidates and tails where it selects at once (blocks.cpp)

    // Whether two or more parts all have caches in cells of the engine's (runtime/cache_cells.h): then each layer
    // writes the cache rows, and pools the indexer keys, of all parts at once (BlockBuilder::dsa).
    bool over_cells() const;
    // Whether the KDA layers also run over all parts at once (BlockBuilder::kda): over_cells, parts of equal rows, all
    // or none keeping snapshots.
    bool kda_over_cells() const;
    // The group's InputCells (created at the first call, filled by set_cells).
    InputCells & cells_input(const HParams & hp);
    void set_cells() const;
    // Whether its parts are of one kind that a DSA layer selects and attends for at once, one node set for all
    // (BlockBuilder::dsa, issue 48): over_cells, in consecutive cells in row order, of equal rows, each gathering
    // its keys (GraphLayout::n_kv 0) from equally many scored pools.
    bool selects_at_once() const;
    // Fills kpool_rows (when made) from every part's KpoolParams.
    void set_kpool_rows() const;

    // The group's output rows of x [n_embd, n_rows]: x itself or its last row when that is what its one part
    // outputs, else the rows out_rows lists (an input created here, filled by set_out_rows).
    ggml_tensor * outputs(ggml_context * ctx, ggml_tensor * x);
    void set_out_rows() const;
};

// The parts and groups of one graph, kept where the custom ops can point to them until the graph is dropped.
struct GraphParts {
    std::deque<GraphPart> parts;  // in row order
    std::deque<RowGroup> groups;  // in row order

    // Adds a part of n_rows rows on `cache` at its n_past (a part of at most few_max rows joins the few-row group
    // when the part before it is in one; a longer one opens a group of its own). With `one_group` every part joins
    // the first group, which is few-row while all its parts are.
    GraphPart & add(const CacheView & cache, int64_t n_rows, int64_t n_out, int64_t few_max, bool one_group = false);
    int64_t n_rows() const { return groups.empty() ? 0 : groups.back().row0 + groups.back().n_rows; }
};

// The rows [r0, r0 + n) of `t` along dimension `dim` (a view; contiguous when t is and dim is its outermost used
// dimension).
ggml_tensor * rows_view(ggml_context * ctx, ggml_tensor * t, int dim, int64_t r0, int64_t n);

}  // namespace glm5next
