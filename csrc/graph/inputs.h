// Graph inputs that create their own tensor and fill it (llama.cpp's llm_graph_input_*: create while building,
// set_input once the graph is allocated). The engine hands each the data; the input knows its shape and layout.
#pragma once

#include <cstdint>
#include <vector>

#include "ggml.h"
#include "graph/select_ops.h"
#include "model/hparams.h"

namespace glm5next {

// An input filled whole from host memory, in ggml's layout: token ids i32 [n_rows] ("inp_tokens"), hidden rows
// f32 [n_embd, n_rows] from row-major [n_rows, n_embd] ("inp_hidden"), a reused selection i32 [n_top_pool, 1]
// ("inp_saved_pools").
struct InputArray {
    ggml_tensor * t = nullptr;
    InputArray(ggml_context * ctx, ggml_type type, int64_t ne0, int64_t ne1, const char * name);
    void set_input(const void * data) const;  // ggml_nbytes(t) bytes
};

// f32 [1, n_rows]: 1 for a row that selects at least one key, 0 for one that selects none (only possible without
// kpool_select_tail; then its attention output is zero). Absent (t == nullptr) with the tail on. Filled per
// sequence: set_input writes the n rows from row0 whose positions `at` describes.
struct InputRowScale {
    ggml_tensor * t = nullptr;
    InputRowScale(ggml_context * ctx, const HParams & hp, int64_t n_rows);
    void set_input(const KpoolParams & at, int64_t row0, int64_t n) const;
};

// What the indexer's choices need when built from ggml's standard ops (graph/select_std.h), per row of the
// ubatch: f32 [1, n_rows] its number of candidate pools (n_candidates); and, once a layer gathers rows (add_tail,
// with kpool_select_tail), its tail rows f32 [kpool-1, n_rows] as exact floats (unused slots 0) and their mask
// f32 [kpool-1, n_rows] (0 or kSelectMasked). Created by the first layer that needs it: an input no node reads
// gets no buffer.
struct InputKpoolRows {
    ggml_tensor * n_cand = nullptr;
    ggml_tensor * tail_rows = nullptr;
    ggml_tensor * tail_mask = nullptr;
    InputKpoolRows(ggml_context * ctx, int64_t n_rows);
    void add_tail(ggml_context * ctx, const HParams & hp);
    // Rows [row0, row0 + n) (n < 0: all) from `at`, which describes those rows (its n_past: row row0's position).
    void set_input(const KpoolParams & at, int64_t row0 = 0, int64_t n = -1) const;
};

// Where a ubatch of n_rows rows at positions n_past.. writes the caches, as inputs instead of view offsets baked
// into the graph (llama.cpp's KV indices for ggml_set_rows), so that the graph does not depend on n_past and is
// reused from step to step (Engine): the rows' positions i64 [n_rows] ("inp_pos") and, once an indexer needs them
// (add_pools), the pools whose pooled keys the ubatch (re)computes (BlockBuilder::indexer): every pool its rows
// touch, max_pools_touched slots of them, a slot past the last touched pool repeating it. Per slot: the pool's
// member rows i32 [kpool, n_slots] ("inp_pool_rows") and its index i64 [n_slots] ("inp_pool_dst"). Pools are
// clamped to the pooled cache's n_pooled rows and rows to the cache's n_ctx rows: a clamped slot recomputes the
// last complete pool from the rows it was computed from (the same bytes), or a pool that can never complete.
struct InputCacheRows {
    ggml_tensor * pos = nullptr;
    ggml_tensor * pool_rows = nullptr;
    ggml_tensor * pool_dst = nullptr;
    InputCacheRows(ggml_context * ctx, int64_t n_rows);
    void add_pools(ggml_context * ctx, int64_t kpool, int64_t n_pooled, int64_t n_ctx);
    void set_input(int64_t n_past) const;

private:
    int64_t kpool_ = 0, n_pooled_ = 0, n_ctx_ = 0;
};

// One part's rows for InputCells: its cell, its row count, and its cell's rows per cache (n_ctx) and pooled keys
// (n_pooled).
struct CellPart {
    int32_t cell = 0;
    int64_t n_rows = 0, n_ctx = 0, n_pooled = 0;
};

// Where the rows of a group whose parts all have cells of the engine's (runtime/cache_cells.h) go in the cells'
// tensors, in part order, so that a layer does for all parts at once what it did per part (BlockBuilder::dsa,
// BlockBuilder::kda), each created by the first layer that needs it (an input no node reads gets no buffer): each
// part's cell i32 [n_parts] ("inp_cells", add_cells); once a layer writes cache rows (add_rows), each
// row's row in the cells, i64 [n_rows] = cell * n_ctx + position ("inp_cell_rows"); once an indexer pools keys
// (add_pools), InputCacheRows's pool slots of every part with their rows and pools offset into its cell
// ("inp_cell_pool_rows" i32 [kpool * n_slots], "inp_cell_pool_dst" i64 [n_slots]).
struct InputCells {
    ggml_tensor * cells = nullptr;
    ggml_tensor * rows = nullptr;
    ggml_tensor * pool_rows = nullptr;
    ggml_tensor * pool_dst = nullptr;
    explicit InputCells(std::vector<CellPart> parts) : parts_(std::move(parts)) {}
    // (each returns its tensor)
    ggml_tensor * add_cells(ggml_context * ctx);
    ggml_tensor * add_rows(ggml_context * ctx);
    void add_pools(ggml_context * ctx, int64_t kpool);
    // the parts' rows at positions n_past[p]..
    void set_input(const std::vector<int64_t> & n_past) const;

private:
    std::vector<CellPart> parts_;
    int64_t kpool_ = 0;
};

// The pool slots InputCacheRows writes for n_rows rows at n_past (n_slots of them, a slot past the last touched pool
// repeating it; pools clamped to n_pooled, rows to n_ctx): dst[i] the pool of slot i, rows[i * kpool + r] its rows.
void pool_slots(int64_t n_past, int64_t n_rows, int64_t n_slots, int64_t kpool, int64_t n_pooled, int64_t n_ctx,
                int64_t * dst, int32_t * rows);

// The most pools n_rows consecutive rows touch (wherever they start): ceil((n_rows - 1) / kpool) + 1.
inline int64_t max_pools_touched(int64_t n_rows, int64_t kpool) { return (n_rows + kpool - 2) / kpool + 1; }

}  // namespace glm5next
