// The caches of up to n_seq_max sequences of one engine (the trunk's; the NextN layer's, another set), one tensor per
// layer and kind with one cell (a range of rows) per sequence: llama.cpp's unified KV cache and recurrent memory, sized as llama.cpp sizes them, by n_seq_max.
// A sequence's caches are views of its cell (runtime/seq_cache.h), so that everything done per sequence is unchanged,
// and a step over several sequences does per layer at once what it did per sequence (graph/blocks.cpp; issue 24):
// it writes every row's latent and indexer keys with one set_rows per tensor, pools the keys of all its sequences in
// one pass, gathers the KDA conv windows and states with one get_rows, runs one conv and one gated delta rule, and
// writes them back with one set_rows. A sequence that finds no free cell (more sequences than n_seq_max, or another
// n_ctx or cache type than the cells') keeps caches of its own and its rows run per sequence.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "graph/layer_cache.h"
#include "model/model.h"

namespace glm5next {

// What a cell's `bytes` of the cells' tensor t count as in a memory report: the same bytes padded to the buffer's
// alignment, as a tensor of the sequence's own would take them (runtime/seq_cache.h; glm5next_runtime/cache_sizes.py).
size_t cell_bytes(const ggml_tensor * t, size_t bytes);
// cell_bytes of a view of one cell's rows.
size_t cell_bytes(const ggml_tensor * view);

class CacheCells {
public:
    // n_cells cells of layers [first_layer, first_layer + n_layers) of `model` (as runtime/seq_cache.h takes them:
    // the trunk's, or the NextN layer's), each layer's on the device of its attention weights (attn_output). Nothing
    // is allocated before the first acquire.
    CacheCells(const Model & model, uint32_t first_layer, uint32_t n_layers, uint32_t n_cells);
    ~CacheCells();
    CacheCells(const CacheCells &) = delete;
    CacheCells & operator=(const CacheCells &) = delete;

    uint32_t n_cells() const { return (uint32_t) taken_.size(); }
    // A free cell for a sequence of n_ctx rows of `cache_type`, or -1 when every cell is taken or the cells hold
    // another n_ctx or type. The first call allocates every cell, for its n_ctx and type (a sequence zeroes what it
    // reads before writing: its KDA states). Throws std::runtime_error when a device cannot hold them.
    int32_t acquire(uint32_t n_ctx, ggml_type cache_type);
    // Gives back a cell acquire returned. Throws std::logic_error for a cell that is not taken. (acquire and release
    // may be called from any thread: sequences are made and freed where their owners are.)
    void release(int32_t cell);
    // Layer il's caches of every cell, in LayerCache's layout with each dimension of rows times n_cells (cell c's
    // rows are [c * rows, (c + 1) * rows)): conv f32 [(K-1) * 3*inner, n_cells] and state f32 [d*d*n_head, n_cells]
    // (a cell's window and state flattened), latent, idx_k, idx_g [width, n_cells * n_ctx], pooled f32
    // [idim, n_cells * n_pooled]. Null tensors before the first acquire and where the layer has none.
    const LayerCache & layer(uint32_t il) const { return layers_.at(il - first_layer_); }
    // Memory (bytes) per device of the cells not taken (a taken cell is its sequence's: SeqCache::bytes_by_device).
    std::map<ggml_backend_dev_t, size_t> free_bytes_by_device() const;

private:
    void allocate(uint32_t n_ctx, ggml_type cache_type);
    // Frees the buffers and contexts and empties the layers (the destructor; an allocation that failed).
    void free_all();

    const Model & model_;
    uint32_t first_layer_;
    uint32_t n_ctx_ = 0;  // rows per cell, 0 before the first acquire
    ggml_type cache_type_ = GGML_TYPE_COUNT;
    std::vector<LayerCache> layers_;  // per layer from first_layer_
    std::vector<bool> taken_;
    mutable std::mutex mutex_;  // over taken_ and the first allocation
    std::vector<ggml_context *> contexts_;  // one per device
    std::vector<ggml_backend_buffer_t> buffers_;
};

}  // namespace glm5next
