#include "engine.h"

#include <stdexcept>
#include <string>
#include <thread>

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "graph_trunk.h"

namespace glm5next {

Engine::Engine(const Model & model, const EngineParams & params)
    : model_(model), params_(params), cache_(model, 0, model.hp.n_trunk(), params.n_ctx) {
    if (params_.n_batch == 0) {
        throw std::invalid_argument("n_batch must be >= 1");
    }
    if (params_.n_threads <= 0) {
        params_.n_threads = (int) std::max(1u, std::thread::hardware_concurrency());
    }
    backend_ = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend_, params_.n_threads);
    galloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
    const size_t n_nodes = graph_size(model);
    meta_.resize(ggml_tensor_overhead() * n_nodes * 2 + ggml_graph_overhead_custom(n_nodes, false));
}

Engine::~Engine() {
    ggml_gallocr_free(galloc_);
    ggml_backend_free(backend_);
}

EvalOutput Engine::eval(const std::vector<int32_t> & tokens, bool logits_all) {
    const HParams & hp = model_.hp;
    if (tokens.empty()) {
        throw std::invalid_argument("eval: no tokens");
    }
    for (int32_t t : tokens) {
        if (t < 0 || (uint32_t) t >= hp.n_vocab) {
            throw std::invalid_argument("eval: token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                        std::to_string(hp.n_vocab) + ")");
        }
    }
    if (cache_.n_past + tokens.size() > cache_.n_ctx()) {
        throw std::invalid_argument("eval: " + std::to_string(cache_.n_past + tokens.size()) +
                                    " tokens exceed the context size n_ctx = " + std::to_string(cache_.n_ctx()));
    }
    EvalOutput out;
    out.n_tokens = (int64_t) tokens.size();
    out.n_logit_rows = logits_all ? out.n_tokens : 1;
    out.logits.resize(out.n_logit_rows * hp.n_vocab);
    out.hidden.resize(out.n_tokens * hp.n_embd);
    for (int64_t row0 = 0; row0 < out.n_tokens; row0 += params_.n_batch) {
        const int64_t n = std::min<int64_t>(params_.n_batch, out.n_tokens - row0);
        eval_ubatch(tokens.data() + row0, n, logits_all, out, row0);
    }
    return out;
}

void Engine::eval_ubatch(const int32_t * tokens, int64_t n, bool logits_all, EvalOutput & out, int64_t row0) {
    const HParams & hp = model_.hp;
    const bool last = row0 + n == out.n_tokens;
    ggml_init_params ip = {meta_.size(), meta_.data(), true};
    ggml_context * ctx = ggml_init(ip);
    TrunkGraph g;
    try {
        build_trunk_graph(g, ctx, model_, cache_, n, logits_all);
        if (!ggml_gallocr_alloc_graph(galloc_, g.gf)) {
            throw std::runtime_error("cannot allocate the compute buffer for a ubatch of " + std::to_string(n));
        }
        ggml_backend_tensor_set(g.inp_tokens, tokens, 0, n * sizeof(int32_t));
        if (g.inp_row_scale) {
            std::vector<float> scale(n);
            for (int64_t t = 0; t < n; ++t) scale[t] = row_has_keys(g.params.kpool, t) ? 1.0f : 0.0f;
            ggml_backend_tensor_set(g.inp_row_scale, scale.data(), 0, n * sizeof(float));
        }
        if (ggml_backend_graph_compute(backend_, g.gf) != GGML_STATUS_SUCCESS) {
            throw std::runtime_error("ggml graph computation failed");
        }
    } catch (...) {
        ggml_free(ctx);
        throw;
    }

    ggml_backend_tensor_get(g.hidden, out.hidden.data() + row0 * hp.n_embd, 0, n * hp.n_embd * sizeof(float));
    if (logits_all) {
        ggml_backend_tensor_get(g.logits, out.logits.data() + row0 * hp.n_vocab, 0, n * hp.n_vocab * sizeof(float));
    } else if (last) {
        ggml_backend_tensor_get(g.logits, out.logits.data(), 0, hp.n_vocab * sizeof(float));
    }
    if (out.pools.empty()) {
        out.dsa_layers = g.dsa_layers;
        out.pools.resize(g.selections.size());
    }
    const int64_t k = g.params.kpool.n_top_pool;
    for (size_t i = 0; i < g.selections.size(); ++i) {
        auto & dst = out.pools[i];
        dst.resize((row0 + n) * k);
        ggml_backend_tensor_get(g.selections[i], dst.data() + row0 * k, 0, n * k * sizeof(int32_t));
    }
    cache_.n_past += (uint32_t) n;
    ggml_free(ctx);
}

}  // namespace glm5next
