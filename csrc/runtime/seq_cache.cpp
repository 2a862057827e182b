#include "runtime/seq_cache.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "ggml-alloc.h"
#include "ggml-cpu.h"

namespace glm5next {

SeqCache::SeqCache(const Model & model, uint32_t first_layer, uint32_t n_layers, uint32_t n_ctx, ggml_type cache_type,
                   CacheCells * cells)
    : hp_(model.hp), first_layer_(first_layer), n_ctx_(n_ctx) {
    const HParams & hp = model.hp;
    // One metadata context per device: each layer's caches live where its attention weights are.
    std::map<ggml_backend_dev_t, ggml_context *> ctx_of;
    auto ctx_for = [&](uint32_t il) {
        ggml_backend_dev_t dev = device_of(model.layers[il].wo);
        if (ctx_of.count(dev) == 0) {
            ctx_of[dev] = ggml_init({ggml_tensor_overhead() * 8 * (n_layers + 1), nullptr, true});
            contexts_.push_back(ctx_of[dev]);
        }
        return ctx_of[dev];
    };
    const int64_t block = ggml_blck_size(cache_type);
    for (const auto & [what, width] : {std::pair<const char *, uint32_t>{"kv_lora_rank", hp.kv_lora_rank},
                                       {"indexer key_length", hp.idx_head_dim}}) {
        if (width % block != 0) {
            throw std::invalid_argument(std::string("cache type ") + ggml_type_name(cache_type) + " stores rows in blocks of " +
                                        std::to_string(block) + " values, and this model's " + what + " is " +
                                        std::to_string(width) + "; use f16, bf16 or f32");
        }
    }
    layers_.resize(n_layers);
    if (cells != nullptr) cell_ = cells->acquire(n_ctx, cache_type);
    if (cell_ >= 0) {
        cells_ = cells;
        cell_views_.reset(ggml_init({6 * n_layers * ggml_tensor_overhead(), nullptr, true}));
    }
    auto placed = [&](ggml_tensor * view) {
        if (ggml_backend_view_init(view) != GGML_STATUS_SUCCESS) {
            free_all();
            throw std::runtime_error("cannot place the views of a cache cell");
        }
        return view;
    };
    // the cell's rows [cell * rows, (cell + 1) * rows) of one of the cells' tensors [width, n_cells * rows]
    auto cell_rows = [&](ggml_tensor * all, int64_t rows) {
        return placed(ggml_view_2d(cell_views_.get(), all, all->ne[0], rows, all->nb[1], cell_ * rows * all->nb[1]));
    };
    const int64_t K = hp.ssm_conv_kernel, d = hp.kda_head_dim, n_pooled = hp.n_pooled(n_ctx);
    for (uint32_t il = first_layer; il < first_layer + n_layers; ++il) {
        LayerCache & c = layers_[il - first_layer];
        if (cell_ >= 0) {  // views of the cell's rows, shaped as the caches of its own would be
            const LayerCache & all = cells->layer(il);
            c.cells = &all;
            if (all.conv != nullptr) {
                c.conv = placed(ggml_view_2d(cell_views_.get(), all.conv, K - 1, 3 * hp.kda_inner(),
                                             (K - 1) * sizeof(float), cell_ * all.conv->nb[1]));
                c.state = placed(ggml_view_3d(cell_views_.get(), all.state, d, d, hp.n_head, d * sizeof(float),
                                              d * d * sizeof(float), cell_ * all.state->nb[1]));
            }
            if (all.latent != nullptr) c.latent = cell_rows(all.latent, n_ctx);
            if (all.idx_k != nullptr) {
                c.idx_k = cell_rows(all.idx_k, n_ctx);
                c.idx_g = cell_rows(all.idx_g, n_ctx);
                c.pooled = cell_rows(all.pooled, n_pooled);
            }
        } else if (hp.is_kda(il)) {
            ggml_context * ctx = ctx_for(il);
            c.conv = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K - 1, 3 * hp.kda_inner());
            c.state = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, d, hp.n_head);
        } else {
            ggml_context * ctx = ctx_for(il);
            c.latent = ggml_new_tensor_2d(ctx, cache_type, hp.kv_lora_rank, n_ctx);
            if (hp.full_indexer(il)) {
                c.idx_k = ggml_new_tensor_2d(ctx, cache_type, hp.idx_head_dim, n_ctx);
                c.idx_g = ggml_new_tensor_2d(ctx, cache_type, hp.idx_head_dim, n_ctx);
                // the pooled keys stay f32: every step scores all of them (a widened copy each step cost a decode
                // step ~5% on the bench preset at depth 4096), and they are a quarter of the indexer keys' rows
                c.pooled = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.idx_head_dim, n_pooled);
            }
        }
        recurrent_ = recurrent_ || c.conv != nullptr;
        static const char * const names[] = {"cache_conv-%u",  "cache_state-%u", "cache_latent-%u",
                                             "cache_idx_k-%u", "cache_idx_g-%u", "cache_kpool-%u"};  // c.tensors()
        const auto tensors = c.tensors();
        for (size_t i = 0; i < tensors.size(); ++i) {
            if (tensors[i] != nullptr) ggml_format_name(tensors[i], names[i], il);
        }
    }
    for (const auto & [dev, ctx] : ctx_of) {
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(dev));
        if (buf == nullptr) {
            free_all();
            throw std::runtime_error("cannot allocate the caches for n_ctx = " + std::to_string(n_ctx) + " on " +
                                     ggml_backend_dev_name(dev));
        }
        buffers_.push_back(buf);
    }
    clear();
}

SeqCache::~SeqCache() { free_all(); }

void SeqCache::free_all() {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
    for (ggml_context * c : contexts_) ggml_free(c);
    buffers_.clear();
    contexts_.clear();
    if (cells_ != nullptr) cells_->release(cell_);
    cells_ = nullptr;
}

std::map<ggml_backend_dev_t, size_t> SeqCache::bytes_by_device() const {
    std::map<ggml_backend_dev_t, size_t> out;
    for (ggml_backend_buffer_t b : buffers_) {
        out[device_of(b)] += ggml_backend_buffer_get_size(b);
    }
    for (const LayerCache & c : layers_) {
        if (c.cells == nullptr) continue;
        for (const ggml_tensor * t : c.tensors()) {
            if (t != nullptr) out[device_of(t->buffer)] += cell_bytes(t);
        }
    }
    return out;
}

void SeqCache::clear() {
    // Zero everything: KDA states must start at zero; the other rows are rewritten before a row reads them, but a
    // dense pass multiplies the rows it masks out by 0, and memory a device hands out may hold NaNs (over RPC a
    // fresh cell's rows gave NaN logits).
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_clear(b, 0);
    if (cells_ != nullptr) {  // the cell's rows, where they live
        for (const LayerCache & c : layers_) {
            for (ggml_tensor * t : c.tensors()) {
                if (t != nullptr) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
            }
        }
    }
    n_past_ = 0;
    pending_.clear();
    pending_rows_ = 0;
}

CacheView SeqCache::view() const {
    return CacheView{layers_.data(), first_layer_, (uint32_t) layers_.size(), n_past_, n_ctx_, cell_};
}

void SeqCache::append(uint32_t n) {
    if (verify_pending()) throw std::logic_error("rows appended while a verify pass awaits its commit");
    n_past_ += n;
}

void SeqCache::truncate(uint32_t n) {
    if (n > n_past_) throw std::logic_error("truncate to " + std::to_string(n) + " of " + std::to_string(n_past_) + " rows");
    if (recurrent_ && n < n_past_) throw std::logic_error("recurrent (KDA) state cannot drop rows; use a verify pass");
    n_past_ = n;
}

RecurrentState SeqCache::save() const {
    if (verify_pending()) throw std::logic_error("a state saved while a verify pass awaits its commit");
    RecurrentState out;
    out.n_past = n_past_;
    for (const LayerCache & c : layers_) {
        for (const ggml_tensor * t : {c.conv, c.state}) {
            if (t == nullptr) continue;
            const size_t at = out.kda.size();
            out.kda.resize(at + ggml_nelements(t));
            ggml_backend_tensor_get(t, out.kda.data() + at, 0, ggml_nbytes(t));
        }
    }
    return out;
}

size_t SeqCache::recurrent_bytes() const {
    size_t n = 0;
    for (const LayerCache & c : layers_) {
        for (const ggml_tensor * t : {c.conv, c.state}) n += t ? ggml_nbytes(t) : 0;
    }
    return n;
}

void SeqCache::restore(const RecurrentState & state) {
    if (verify_pending()) throw std::logic_error("a state restored while a verify pass awaits its commit");
    if (state.n_past > n_past_) {
        throw std::logic_error("restore to row " + std::to_string(state.n_past) + " of " + std::to_string(n_past_));
    }
    if (recurrent_bytes() != state.bytes()) throw std::logic_error("a saved state of another shape");
    size_t at = 0;
    for (const LayerCache & c : layers_) {
        for (ggml_tensor * t : {c.conv, c.state}) {
            if (t == nullptr) continue;
            ggml_backend_tensor_set(t, state.kda.data() + at, 0, ggml_nbytes(t));
            at += ggml_nelements(t);
        }
    }
    n_past_ = state.n_past;
}

size_t CacheRows::bytes() const {
    size_t n = 0;
    for (const auto & t : tensors) n += t.data.size();
    return n;
}

std::vector<std::pair<ggml_tensor *, size_t>> SeqCache::parts(uint32_t n_past) const {
    std::vector<std::pair<ggml_tensor *, size_t>> out;
    const int64_t pools_begun = (n_past + hp_.idx_kpool - 1) / hp_.idx_kpool;
    for (const LayerCache & c : layers_) {
        for (ggml_tensor * t : {c.conv, c.state}) {
            if (t != nullptr) out.emplace_back(t, ggml_nbytes(t));
        }
        for (ggml_tensor * t : {c.latent, c.idx_k, c.idx_g}) {
            if (t != nullptr) out.emplace_back(t, t->nb[1] * n_past);
        }
        if (c.pooled != nullptr) {
            out.emplace_back(c.pooled, c.pooled->nb[1] * std::min<int64_t>(pools_begun, c.pooled->ne[1]));
        }
    }
    return out;
}

CacheRows SeqCache::rows() const {
    if (verify_pending()) throw std::logic_error("rows saved while a verify pass awaits its commit");
    CacheRows out;
    out.n_past = n_past_;
    for (const auto & [t, n] : parts(n_past_)) {
        out.tensors.push_back({t->type, std::vector<uint8_t>(n)});
        if (n > 0) ggml_backend_tensor_get(t, out.tensors.back().data.data(), 0, n);
    }
    return out;
}

void SeqCache::check_rows(const CacheRows & rows) const {
    if (rows.n_past > n_ctx_) {
        throw std::invalid_argument(std::to_string(rows.n_past) + " rows do not fit n_ctx = " + std::to_string(n_ctx_));
    }
    const auto want = parts(rows.n_past);
    if (rows.tensors.size() != want.size()) {
        throw std::invalid_argument(std::to_string(rows.tensors.size()) + " cache tensors where this model has " +
                                    std::to_string(want.size()) + " (a sequence of another model)");
    }
    for (size_t i = 0; i < want.size(); ++i) {
        const ggml_tensor * t = want[i].first;
        if (rows.tensors[i].type != t->type) {
            throw std::invalid_argument(std::string("cache tensor ") + ggml_get_name(t) + " is " +
                                        ggml_type_name(rows.tensors[i].type) + " where this sequence keeps " +
                                        ggml_type_name(t->type) + " (saved with another cache type, -ctk)");
        }
        if (rows.tensors[i].data.size() != want[i].second) {
            throw std::invalid_argument(std::string("cache tensor ") + ggml_get_name(t) + " has " +
                                        std::to_string(rows.tensors[i].data.size()) + " bytes for " +
                                        std::to_string(rows.n_past) + " rows where this model has " +
                                        std::to_string(want[i].second) + " (a sequence of another model)");
        }
    }
}

void SeqCache::set_rows(const CacheRows & rows) {
    if (verify_pending()) throw std::logic_error("rows set while a verify pass awaits its commit");
    check_rows(rows);
    clear();
    const auto want = parts(rows.n_past);
    for (size_t i = 0; i < want.size(); ++i) {
        if (want[i].second > 0) {
            ggml_backend_tensor_set(want[i].first, rows.tensors[i].data.data(), 0, want[i].second);
        }
    }
    n_past_ = rows.n_past;
}

void SeqCache::begin_verify(std::vector<KdaSnapshots> snapshots, uint32_t n_rows) {
    if (verify_pending()) throw std::logic_error("a verify pass began before the last one was committed");
    if (n_rows == 0) throw std::logic_error("a verify pass of 0 rows");
    pending_ = std::move(snapshots);
    pending_rows_ = n_rows;
}

void SeqCache::commit(uint32_t n_keep) {
    if (!verify_pending() || n_keep < 1 || n_keep > pending_rows_) {
        throw std::logic_error("commit " + std::to_string(n_keep) + " rows of a verify pass of " +
                               std::to_string(pending_rows_));
    }
    if (n_keep < pending_rows_) {
        for (const KdaSnapshots & s : pending_) rollback_kda(s, pending_rows_, n_keep);
    }
    n_past_ += n_keep;  // attention rows past n_past are dropped: rewritten before read
    pending_.clear();
    pending_rows_ = 0;
}

// The state after row n_keep-1 is the sequence's in slot (n_rows - n_keep) of the packed states (slot s = s rows back
// from the last), after the n_rows outputs of each of the n_parts sequences; the conv window after it is the
// sequence's window n_keep-1 of the snapshots. Both are copied where
// they live (copy_bytes; issue 26): over ggml RPC, fully offloaded, the bench
// preset's rounds that reject every draft moved 11.2 MiB per round across the connection when the state went through
// the host (2.3x its KDA states), 0.9 MiB now (the round's other traffic; tests/csrc/test_devices.py).
void SeqCache::rollback_kda(const KdaSnapshots & s, int64_t n_rows, int64_t n_keep) {
    const int64_t d = hp_.kda_head_dim, nh = hp_.n_head, P = s.n_parts;
    const size_t state_bytes = d * d * nh * sizeof(float);
    const size_t state_offset = d * nh * n_rows * P * sizeof(float) + ((n_rows - n_keep) * P + s.part) * state_bytes;
    const size_t window_bytes = ggml_nbytes(s.cache->conv);
    copy_bytes(s.packed, state_offset, s.cache->state, state_bytes);
    copy_bytes(s.windows, ((n_keep - 1) * P + s.part) * window_bytes, s.cache->conv, window_bytes);
}

// Through two views, with ggml_backend_tensor_copy: a memcpy in host memory, the buffers' own copy when both are on
// one device (CUDA device to device, one COPY_TENSOR command to an RPC server; issue 26: nothing of the state crosses
// to the host), else through host memory.
void SeqCache::copy_bytes(ggml_tensor * src, size_t offset, ggml_tensor * dst, size_t bytes) {
    ggml_reset(views_.get());
    ggml_tensor * from = ggml_view_1d(views_.get(), src, (int64_t) (bytes / ggml_type_size(src->type)), offset);
    ggml_tensor * to = ggml_view_1d(views_.get(), dst, (int64_t) (bytes / ggml_type_size(dst->type)), 0);
    if (ggml_backend_view_init(from) != GGML_STATUS_SUCCESS || ggml_backend_view_init(to) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("cannot place the views of a KDA state copy");
    }
    ggml_backend_tensor_copy(from, to);
}

}  // namespace glm5next
