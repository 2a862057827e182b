#include "kv_cache.h"

#include <stdexcept>

#include "ggml-alloc.h"
#include "ggml-cpu.h"

namespace glm5next {

SeqCache::SeqCache(const Model & model, uint32_t first_layer, uint32_t n_layers, uint32_t n_ctx)
    : first_layer_(first_layer), n_ctx_(n_ctx) {
    const HParams & hp = model.hp;
    ggml_init_params params = {ggml_tensor_overhead() * 8 * (n_layers + 1), nullptr, true};
    ctx_ = ggml_init(params);
    layers_.resize(n_layers);
    for (uint32_t il = first_layer; il < first_layer + n_layers; ++il) {
        LayerCache & c = layers_[il - first_layer];
        if (hp.is_kda(il)) {
            c.conv = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, hp.ssm_conv_kernel - 1, 3 * hp.kda_inner());
            c.state = ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, hp.kda_head_dim, hp.kda_head_dim, hp.n_head);
            continue;
        }
        c.latent = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, hp.kv_lora_rank, n_ctx);
        const bool full = il >= hp.n_trunk() || hp.idx_full[il];
        if (full) {
            c.idx_k = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, hp.idx_head_dim, n_ctx);
            c.idx_g = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, hp.idx_head_dim, n_ctx);
            c.pooled = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, hp.idx_head_dim, std::max<uint32_t>(1, n_ctx / hp.idx_kpool));
        }
    }
    buf_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, ggml_backend_cpu_buffer_type());
    if (buf_ == nullptr) {
        ggml_free(ctx_);
        throw std::runtime_error("cannot allocate the caches for n_ctx = " + std::to_string(n_ctx));
    }
    clear();
}

SeqCache::~SeqCache() {
    ggml_backend_buffer_free(buf_);
    ggml_free(ctx_);
}

void SeqCache::clear() {
    // Zero everything: KDA states must start at zero; the other rows are rewritten before they are read.
    ggml_backend_buffer_clear(buf_, 0);
    n_past = 0;
}

}  // namespace glm5next
