#include "runtime/cache_cells.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace glm5next {

CacheCells::CacheCells(const Model & model, uint32_t first_layer, uint32_t n_layers, uint32_t n_cells)
    : model_(model), first_layer_(first_layer), layers_(n_layers), taken_(n_cells, false) {}

CacheCells::~CacheCells() { free_all(); }

void CacheCells::free_all() {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
    for (ggml_context * c : contexts_) ggml_free(c);
    buffers_.clear();
    contexts_.clear();
    layers_.assign(layers_.size(), LayerCache{});
}

void CacheCells::allocate(uint32_t n_ctx, ggml_type cache_type) {
    const HParams & hp = model_.hp;
    const int64_t n = n_cells(), d = hp.kda_head_dim, n_pooled = hp.n_pooled(n_ctx);
    if (n * n_ctx > INT32_MAX) {  // the pooled keys' member rows are gathered by i32 indices (get_rows)
        throw std::invalid_argument(std::to_string(n) + " sequences (n_seq_max) of n_ctx = " + std::to_string(n_ctx) +
                                    " rows exceed the 2^31 rows one cache tensor's indices reach");
    }
    std::map<ggml_backend_dev_t, ggml_context *> ctx_of;
    for (uint32_t il = first_layer_; il < first_layer_ + layers_.size(); ++il) {
        ggml_backend_dev_t dev = device_of(model_.layers[il].wo);
        if (ctx_of.count(dev) == 0) {
            ctx_of[dev] = ggml_init({ggml_tensor_overhead() * 4 * layers_.size(), nullptr, true});
            contexts_.push_back(ctx_of[dev]);
        }
        ggml_context * ctx = ctx_of[dev];
        LayerCache & c = layers_[il - first_layer_];
        if (hp.is_kda(il)) {
            c.conv = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, (hp.ssm_conv_kernel - 1) * 3 * hp.kda_inner(), n);
            c.state = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d * d * hp.n_head, n);
            ggml_format_name(c.conv, "cells_conv-%u", il);
            ggml_format_name(c.state, "cells_state-%u", il);
            continue;
        }
        c.latent = ggml_new_tensor_2d(ctx, cache_type, hp.kv_lora_rank, n * n_ctx);
        ggml_format_name(c.latent, "cells_latent-%u", il);
        if (hp.full_indexer(il)) {
            c.idx_k = ggml_new_tensor_2d(ctx, cache_type, hp.idx_head_dim, n * n_ctx);
            c.idx_g = ggml_new_tensor_2d(ctx, cache_type, hp.idx_head_dim, n * n_ctx);
            c.pooled = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.idx_head_dim, n * n_pooled);
            ggml_format_name(c.idx_k, "cells_idx_k-%u", il);
            ggml_format_name(c.idx_g, "cells_idx_g-%u", il);
            ggml_format_name(c.pooled, "cells_kpool-%u", il);
        }
    }
    for (const auto & [dev, ctx] : ctx_of) {
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(dev));
        if (buf == nullptr) {
            free_all();
            throw std::runtime_error("cannot allocate the caches of " + std::to_string(n) + " sequences (n_seq_max) of " +
                                     "n_ctx = " + std::to_string(n_ctx) + " on " + ggml_backend_dev_name(dev));
        }
        buffers_.push_back(buf);
    }
    n_ctx_ = n_ctx;
    cache_type_ = cache_type;
}

int32_t CacheCells::acquire(uint32_t n_ctx, ggml_type cache_type) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n_ctx_ == 0 && n_cells() > 0) allocate(n_ctx, cache_type);
    if (n_ctx != n_ctx_ || cache_type != cache_type_) return -1;
    const auto free = std::find(taken_.begin(), taken_.end(), false);
    if (free == taken_.end()) return -1;
    *free = true;
    return (int32_t) (free - taken_.begin());
}

void CacheCells::release(int32_t cell) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cell < 0 || (size_t) cell >= taken_.size() || !taken_[cell]) {
        throw std::logic_error("cache cell " + std::to_string(cell) + " released but not taken");
    }
    taken_[cell] = false;
}

std::map<ggml_backend_dev_t, size_t> CacheCells::free_bytes_by_device() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<ggml_backend_dev_t, size_t> out;
    const size_t n_free = std::count(taken_.begin(), taken_.end(), false);
    for (const LayerCache & c : layers_) {
        for (const ggml_tensor * t : c.tensors()) {
            if (t != nullptr) out[device_of(t->buffer)] += n_free * cell_bytes(t, ggml_nbytes(t) / n_cells());
        }
    }
    return out;
}

size_t cell_bytes(const ggml_tensor * t, size_t bytes) {
    const size_t align = ggml_backend_buffer_get_alignment(t->buffer);
    return (bytes + align - 1) / align * align;
}

size_t cell_bytes(const ggml_tensor * view) { return cell_bytes(view, ggml_nbytes(view)); }

}  // namespace glm5next
