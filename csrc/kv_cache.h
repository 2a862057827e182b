// Per-sequence caches of the glm5next trunk (runtime.md, Engine), sized from n_ctx:
//   KDA layers: conv window (the last K-1 pre-conv q|k|v rows) and the recurrent state per head;
//   DSA layers: the normalized MLA latent per row; full indexer layers also the indexer key and pool gate per
//   row and one pooled key per complete pool (pools anchored at row 0).
// Row p of every cache holds position p of the sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "model.h"

namespace glm5next {

struct LayerCache {
    ggml_tensor * conv = nullptr;    // KDA: f32 [K-1, 3*inner] (ggml_ssm_conv's state layout)
    ggml_tensor * state = nullptr;   // KDA: f32 [d, d, n_head] (ggml_gated_delta_net's layout, S transposed)
    ggml_tensor * latent = nullptr;  // DSA: f32 [kv_lora_rank, n_ctx]
    ggml_tensor * idx_k = nullptr;   // full indexer: f32 [idx_head_dim, n_ctx] (after k_norm)
    ggml_tensor * idx_g = nullptr;   // full indexer: f32 [idx_head_dim, n_ctx] (compress gate scores)
    ggml_tensor * pooled = nullptr;  // full indexer: f32 [idx_head_dim, n_ctx / kpool]
};

class SeqCache {
public:
    // Allocates the caches of layers [first_layer, first_layer + n_layers) of `model` for n_ctx rows in a CPU
    // buffer, zeroed: the trunk's layers for the trunk, the NextN layer for the draft head.
    SeqCache(const Model & model, uint32_t first_layer, uint32_t n_layers, uint32_t n_ctx);
    ~SeqCache();
    SeqCache(const SeqCache &) = delete;
    SeqCache & operator=(const SeqCache &) = delete;

    // Forget the sequence: recurrent states back to zero, n_past to 0 (rows past n_past are never read).
    void clear();

    uint32_t n_ctx() const { return n_ctx_; }
    const LayerCache & layer(uint32_t il) const { return layers_.at(il - first_layer_); }
    uint32_t n_past = 0;  // rows written

private:
    std::vector<LayerCache> layers_;
    uint32_t first_layer_;
    uint32_t n_ctx_;
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
};

}  // namespace glm5next
