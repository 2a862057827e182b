// The caches of one sequence (docs/runtime.md, Engine; layout in graph/layer_cache.h), sized for n_ctx rows, and
// their rollback: a verify pass appends rows provisionally, and commit(n_keep) keeps a prefix of them. Attention
// caches roll back by dropping rows (rows past n_past are rewritten before they are read); the KDA conv windows
// and recurrent states cannot be truncated, so they jump to the per-row snapshot the verify pass left.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "graph/layer_cache.h"
#include "model/model.h"
#include "runtime/cache_cells.h"

namespace glm5next {

// The recurrent part of a sequence after n_past rows, copied to host memory: every KDA layer's conv window and
// state, in layer order (empty for a cache without KDA layers). With the attention rows before n_past, which a
// cache keeps until they are overwritten, it lets the sequence resume at row n_past.
struct RecurrentState {
    uint32_t n_past = 0;
    std::vector<float> kda;
    size_t bytes() const { return kda.size() * sizeof(float); }
};

// One cache tensor's rows in use, as the cache stores them: its ggml type and the bytes.
struct TensorRows {
    ggml_type type = GGML_TYPE_F32;
    std::vector<uint8_t> data;
};

// The rows a sequence has written, copied to host memory, for saving it elsewhere (runtime/sequence_state.h):
// n_past and, per cache tensor in layer order (conv, state, latent, idx_k, idx_g, pooled), the rows in use:
// KDA conv windows and states whole, the latent and indexer rows [0, n_past), the pooled keys of the pools begun.
struct CacheRows {
    uint32_t n_past = 0;
    std::vector<TensorRows> tensors;
    size_t bytes() const;
};

class SeqCache {
public:
    // Allocates the caches of layers [first_layer, first_layer + n_layers) of `model` for n_ctx rows, zeroed, each
    // layer's on the device of its attention weights (attn_output): the trunk's layers for the trunk, the NextN
    // layer for the draft head. The attention rows (latent, indexer keys and gates) are of `cache_type`
    // (SequenceParams::cache_type); the pooled keys and the KDA conv windows and states are f32. They are views of
    // a cell of `cells` (the engine's, for these layers) while one fits, else tensors of the cache's own. Throws
    // std::runtime_error when a device cannot hold them.
    SeqCache(const Model & model, uint32_t first_layer, uint32_t n_layers, uint32_t n_ctx, ggml_type cache_type,
             CacheCells * cells = nullptr);
    ~SeqCache();
    SeqCache(const SeqCache &) = delete;
    SeqCache & operator=(const SeqCache &) = delete;

    // Forget the sequence: recurrent states back to zero, n_past to 0, no verify pass pending.
    void clear();

    // What a graph reads and appends: the layers' tensors and the rows written so far.
    CacheView view() const;
    const LayerCache & layer(uint32_t il) const { return layers_.at(il - first_layer_); }
    uint32_t n_ctx() const { return n_ctx_; }
    // The engine's cell its caches are views of (runtime/cache_cells.h), or -1: tensors of its own.
    int32_t cell() const { return cell_; }
    // Cache memory (bytes) per device, its cell's rows included.
    std::map<ggml_backend_dev_t, size_t> bytes_by_device() const;
    uint32_t n_past() const { return n_past_; }

    // A computed graph appended n rows for good (prefill, decode, draft-head rows).
    void append(uint32_t n);
    // Keep rows [0, n) and drop the rest. Only attention caches can drop rows: throws std::logic_error when a
    // layer has recurrent (KDA) state and rows would be dropped.
    void truncate(uint32_t n);

    // A copy of the recurrent state now (n_past rows written; no verify pass pending), and its size in bytes.
    RecurrentState save() const;
    size_t recurrent_bytes() const;
    // Resumes at state.n_past: the attention rows after it are dropped (they are rewritten before they are
    // read) and the KDA conv windows and states are copied back. The attention rows before it must still be those
    // the state was saved with: the caller restores only a state of this sequence's current prefix. Throws
    // std::logic_error while a verify pass is pending, for a state past n_past or of another shape.
    void restore(const RecurrentState & state);

    // The sequence's rows in host memory (no verify pass pending: throws std::logic_error).
    CacheRows rows() const;
    // Throws std::invalid_argument, naming what differs, when `rows` do not fit this cache: another tensor count or
    // row width (a sequence of another model) or type (saved with another cache type), more rows than n_ctx.
    void check_rows(const CacheRows & rows) const;
    // Replaces the sequence with `rows` (check_rows first; throws std::logic_error while a verify pass is pending).
    void set_rows(const CacheRows & rows);

    // A computed verify graph appended n_rows rows provisionally and left `snapshots` (one per KDA layer, in its
    // compute buffer: nothing else may run until commit). n_past stays until commit.
    void begin_verify(std::vector<KdaSnapshots> snapshots, uint32_t n_rows);
    bool verify_pending() const { return pending_rows_ > 0; }
    // Keeps rows [0, n_keep) of the pending verify pass (1 <= n_keep <= its rows) and rolls back the rest: every
    // KDA state jumps to its snapshot after row n_keep-1 and every conv window to the K-1 pre-conv rows ending
    // there; the attention rows after it are dropped. Throws std::logic_error without a pending pass or for an
    // n_keep out of range.
    void commit(uint32_t n_keep);

private:
    // Frees the buffers and contexts and gives the cell back (the destructor; a constructor that throws).
    void free_all();
    // Per cache tensor in CacheRows order: the tensor and how many of its bytes a sequence of n_past rows uses.
    std::vector<std::pair<ggml_tensor *, size_t>> parts(uint32_t n_past) const;
    void rollback_kda(const KdaSnapshots & s, int64_t n_rows, int64_t n_keep);
    // Copies `bytes` of `src` from byte `offset` into the start of `dst`, where they live (seq_cache.cpp).
    void copy_bytes(ggml_tensor * src, size_t offset, ggml_tensor * dst, size_t bytes);

    const HParams & hp_;  // the model's, which outlives the cache
    std::vector<LayerCache> layers_;
    uint32_t first_layer_;
    uint32_t n_ctx_;
    uint32_t n_past_ = 0;  // rows written
    bool recurrent_ = false;  // some layer has KDA state
    std::vector<KdaSnapshots> pending_;
    uint32_t pending_rows_ = 0;
    std::vector<ggml_context *> contexts_;  // one per device
    std::vector<ggml_backend_buffer_t> buffers_;
    CacheCells * cells_ = nullptr;  // with the cell its caches are views of (else null)
    int32_t cell_ = -1;
    std::unique_ptr<ggml_context, void (*)(ggml_context *)> cell_views_{nullptr, ggml_free};  // the views of the cell
    // the two views copy_bytes copies through: metadata only, reset before each copy (no allocation per rollback)
    std::unique_ptr<ggml_context, void (*)(ggml_context *)> views_{
        ggml_init({2 * ggml_tensor_overhead(), nullptr, true}), ggml_free};
};

}  // namespace glm5next
