// What the graphs read and append of a sequence's caches (docs/runtime.md, Engine), one LayerCache per layer:
//   KDA layers: conv window (the last K-1 pre-conv q|k|v rows) and the recurrent state per head;
//   DSA layers: the normalized MLA latent per row; full indexer layers also the indexer key and pool gate per
//   row and one pooled key per complete pool (pools anchored at row 0).
// Row p of every cache holds position p of the sequence. The tensors are owned by runtime/seq_cache.h, or
// are views of the engine's runtime/cache_cells.h.
#pragma once

#include <array>
#include <cstdint>

#include "ggml.h"

namespace glm5next {

struct LayerCache {
    ggml_tensor * conv = nullptr;    // KDA: f32 [K-1, 3*inner] (ggml_ssm_conv's state layout)
    ggml_tensor * state = nullptr;   // KDA: f32 [d, d, n_head] (ggml_gated_delta_net's layout, S transposed)
    // the rows are of the sequence's cache type (f16 by default; bf16, f32, q8_0 or q4_0: SequenceParams::cache_type)
    ggml_tensor * latent = nullptr;  // DSA: [kv_lora_rank, n_ctx]
    ggml_tensor * idx_k = nullptr;   // full indexer: [idx_head_dim, n_ctx] (after k_norm)
    ggml_tensor * idx_g = nullptr;   // full indexer: [idx_head_dim, n_ctx] (compress gate scores)
    ggml_tensor * pooled = nullptr;  // full indexer: f32 [idx_head_dim, HParams::n_pooled(n_ctx)] (seq_cache.cpp: why)
    // In a cell of the engine's (runtime/cache_cells.h): the layer's caches of every cell, of which the tensors above
    // are views (cell CacheView::cell); null for caches of the sequence's own.
    const LayerCache * cells = nullptr;

    // Its tensors in CacheRows order (runtime/seq_cache.h), null where the layer has none.
    std::array<ggml_tensor *, 6> tensors() const { return {conv, state, latent, idx_k, idx_g, pooled}; }
};

// The caches one graph works on: layers [first_layer, first_layer + n_layers) of n_ctx rows, n_past rows already
// written.
struct CacheView {
    const LayerCache * layers = nullptr;
    uint32_t first_layer = 0;
    uint32_t n_layers = 0;
    int64_t n_past = 0;
    int64_t n_ctx = 0;
    int32_t cell = -1;  // the engine's cell its caches are views of (runtime/cache_cells.h), or -1: its own

    const LayerCache & layer(uint32_t il) const { return layers[il - first_layer]; }
};

// What a verify pass leaves of one KDA layer so that any prefix of its rows can be kept without replay: the
// recurrent state and the conv window after every row. The tensors are graph outputs where the layer runs (on its
// device), valid until the next graph is allocated; the sequence cache rolls back from them (SeqCache::commit).
struct KdaSnapshots {
    const LayerCache * cache = nullptr;
    // ggml_gated_delta_net's output over n_parts sequences of T rows each: the outputs, then per slot s (the states s
    // rows back from the last) the state of every sequence
    ggml_tensor * packed = nullptr;
    ggml_tensor * windows = nullptr;  // f32 [K-1, 3*inner, n_parts, T]: the conv caches after each row (q|k|v channels)
    int64_t part = 0;     // which of the n_parts sequences this one is (several: their states were in cells)
    int64_t n_parts = 1;
};

}  // namespace glm5next
