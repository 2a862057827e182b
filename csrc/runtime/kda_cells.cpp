#include "runtime/kda_cells.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace glm5next {

KdaCells::KdaCells(const Model & model, uint32_t n_cells) : taken_(n_cells, false) {
    const HParams & hp = model.hp;
    const uint32_t n_layers = hp.n_trunk();
    conv_.assign(n_layers, nullptr);
    state_.assign(n_layers, nullptr);
    std::map<ggml_backend_dev_t, ggml_context *> ctx_of;
    for (uint32_t il = 0; il < n_layers && n_cells > 0; ++il) {
        if (!hp.is_kda(il)) continue;
        ggml_backend_dev_t dev = device_of(model.layers[il].wo);
        if (ctx_of.count(dev) == 0) {
            ctx_of[dev] = ggml_init({ggml_tensor_overhead() * 2 * n_layers, nullptr, true});
            contexts_.push_back(ctx_of[dev]);
        }
        const int64_t d = hp.kda_head_dim;
        const int64_t window = (hp.ssm_conv_kernel - 1) * 3 * hp.kda_inner();
        conv_[il] = ggml_new_tensor_2d(ctx_of[dev], GGML_TYPE_F32, window, n_cells);
        state_[il] = ggml_new_tensor_2d(ctx_of[dev], GGML_TYPE_F32, d * d * hp.n_head, n_cells);
        ggml_format_name(conv_[il], "kda_cells_conv-%u", il);
        ggml_format_name(state_[il], "kda_cells_state-%u", il);
    }
    for (const auto & [dev, ctx] : ctx_of) {
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(dev));
        if (buf == nullptr) {
            for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
            for (ggml_context * c : contexts_) ggml_free(c);
            throw std::runtime_error("cannot allocate the KDA states of " + std::to_string(n_cells) +
                                     " sequences (n_seq_max) on " + ggml_backend_dev_name(dev));
        }
        buffers_.push_back(buf);
    }
}

KdaCells::~KdaCells() {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
    for (ggml_context * c : contexts_) ggml_free(c);
}

int32_t KdaCells::acquire() {
    for (size_t i = 0; i < taken_.size(); ++i) {
        if (!taken_[i]) {
            taken_[i] = true;
            return (int32_t) i;
        }
    }
    return -1;
}

void KdaCells::release(int32_t cell) {
    if (cell < 0 || (size_t) cell >= taken_.size() || !taken_[cell]) {
        throw std::logic_error("KDA cell " + std::to_string(cell) + " released but not taken");
    }
    taken_[cell] = false;
}

std::map<ggml_backend_dev_t, size_t> KdaCells::free_bytes_by_device() const {
    std::map<ggml_backend_dev_t, size_t> out;
    const size_t n_free = std::count(taken_.begin(), taken_.end(), false);
    for (size_t il = 0; il < conv_.size(); ++il) {
        if (conv_[il] == nullptr) continue;
        out[device_of(conv_[il]->buffer)] += n_free * (conv_[il]->nb[1] + state_[il]->nb[1]);
    }
    return out;
}

}  // namespace glm5next
