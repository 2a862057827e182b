// The KDA conv windows and recurrent states of up to n_seq_max sequences of one engine, one tensor per KDA layer and
// kind with one row per cell (llama.cpp's recurrent memory: a cell per sequence, as many as n_seq_max). A step's graph
// gathers the states of all its sequences with one get_rows and writes them back with one set_rows, and runs one
// conv and one gated delta rule over them (graph/blocks.cpp, BlockBuilder::kda), where keeping each sequence's states
// in tensors of its own takes a conv, a gated delta rule, two copies and three concats per sequence and KDA layer
// (issue 24: 189 of the 1236 nodes of a 4-sequence decode step on the bundled model). A sequence that finds no free
// cell keeps its states in tensors of its own (runtime/seq_cache.h) and its rows run per sequence.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "model/model.h"

namespace glm5next {

class KdaCells {
public:
    // n_cells cells of the trunk's KDA layers of `model`, each layer's on the device of its attention weights
    // (attn_output, as runtime/seq_cache.h places a sequence's caches). Throws std::runtime_error when a device
    // cannot hold them.
    KdaCells(const Model & model, uint32_t n_cells);
    ~KdaCells();
    KdaCells(const KdaCells &) = delete;
    KdaCells & operator=(const KdaCells &) = delete;

    uint32_t n_cells() const { return (uint32_t) taken_.size(); }
    // A free cell (zeroed by its sequence), or -1 when every cell is taken.
    int32_t acquire();
    // Gives back a cell acquire returned. Throws std::logic_error for a cell that is not taken.
    void release(int32_t cell);
    // Layer il's conv windows f32 [(K-1) * 3*inner, n_cells] (each row a LayerCache::conv) and recurrent states
    // f32 [d*d*n_head, n_cells] (each row a LayerCache::state); null for a layer without KDA.
    ggml_tensor * conv(uint32_t il) const { return conv_.at(il); }
    ggml_tensor * state(uint32_t il) const { return state_.at(il); }
    // Memory (bytes) per device of the cells not taken (a taken cell is its sequence's: SeqCache::bytes_by_device).
    std::map<ggml_backend_dev_t, size_t> free_bytes_by_device() const;

private:
    std::vector<ggml_tensor *> conv_, state_;  // per trunk layer
    std::vector<bool> taken_;
    std::vector<ggml_context *> contexts_;  // one per device
    std::vector<ggml_backend_buffer_t> buffers_;
};

}  // namespace glm5next
