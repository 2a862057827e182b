#include "engine.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "graph_draft.h"
#include "graph_trunk.h"

namespace glm5next {

namespace {

// Rows that select no key (possible only without kpool_select_tail) get a zero attention output.
void set_row_scale(ggml_tensor * row_scale, const KpoolParams & p, int64_t n) {
    if (row_scale == nullptr) return;
    std::vector<float> scale(n);
    for (int64_t t = 0; t < n; ++t) scale[t] = row_has_keys(p, t) ? 1.0f : 0.0f;
    ggml_backend_tensor_set(row_scale, scale.data(), 0, n * sizeof(float));
}

// The per-graph context (tensor and graph metadata only; data lives in the gallocr buffer and the caches).
struct GraphContext {
    ggml_context * ctx;
    explicit GraphContext(std::vector<uint8_t> & meta) : ctx(ggml_init({meta.size(), meta.data(), true})) {}
    ~GraphContext() { ggml_free(ctx); }
};

}  // namespace

// A separate draft file must describe the same model: the draft head reads the trunk's hidden states and tokens.
static const Model & checked_draft_model(const Model & model, const Model * draft) {
    if (draft == nullptr) return model;
    const HParams &a = model.hp, &b = draft->hp;
    if (b.n_nextn == 0) throw std::invalid_argument(draft->path + ": the draft file has no NextN layer");
    if (a.n_embd != b.n_embd || a.n_vocab != b.n_vocab || a.n_trunk() != b.n_trunk()) {
        throw std::invalid_argument(draft->path + ": the draft file does not fit " + model.path +
                                    " (embedding length, vocabulary or trunk layer count differ)");
    }
    return *draft;
}

Engine::Engine(const Model & model, const EngineParams & params, const Model * draft_model)
    : model_(model), draft_model_(checked_draft_model(model, draft_model)), params_(params),
      cache_(model, 0, model.hp.n_trunk(), params.n_ctx) {
    if (params_.n_batch == 0) {
        throw std::invalid_argument("n_batch must be >= 1");
    }
    if (params_.n_threads <= 0) {
        params_.n_threads = (int) std::max(1u, std::thread::hardware_concurrency());
    }
    if (draft_model_.hp.n_nextn > 0) {
        draft_cache_ = std::make_unique<SeqCache>(draft_model_, draft_model_.hp.n_trunk(), 1, params.n_ctx);
        draft_weights_ = std::make_unique<DraftWeights>(draft_model_, params.draft_type);
    } else if (params.draft_type != GGML_TYPE_COUNT) {
        throw std::invalid_argument(model.path + ": a draft type was given but the file has no NextN layer");
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

void Engine::alloc(ggml_cgraph * gf) {
    if (!ggml_gallocr_alloc_graph(galloc_, gf)) {
        throw std::runtime_error("cannot allocate the compute buffer of a graph");
    }
}

void Engine::compute(ggml_cgraph * gf) {
    if (ggml_backend_graph_compute(backend_, gf) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("ggml graph computation failed");
    }
}

EvalOutput Engine::eval(const std::vector<int32_t> & tokens, bool logits_all) {
    const HParams & hp = model_.hp;
    if (tokens.empty()) {
        throw std::invalid_argument("eval: no tokens");
    }
    check_tokens(tokens.data(), (int64_t) tokens.size());
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
        eval_ubatch(tokens.data() + row0, n, logits_all, out, row0, nullptr);
    }
    return out;
}

void Engine::verify(const std::vector<int32_t> & tokens, const KeepRows & keep, EvalOutput & out) {
    const int64_t n = (int64_t) tokens.size();
    if (n == 0 || n > params_.n_batch || cache_.n_past + n > cache_.n_ctx()) {
        throw std::invalid_argument("verify: " + std::to_string(n) + " rows must be >= 1, fit one ubatch (n_batch = " +
                                    std::to_string(params_.n_batch) + ") and the context");
    }
    check_tokens(tokens.data(), n);
    out.n_tokens = out.n_logit_rows = n;
    out.logits.resize(n * model_.hp.n_vocab);
    out.hidden.resize(n * model_.hp.n_embd);
    eval_ubatch(tokens.data(), n, true, out, 0, &keep);
}

// Keeps rows [0, n_keep) of a verify pass: every KDA state jumps to its snapshot after row n_keep-1 and every conv
// window to the K-1 pre-conv rows ending there. (CPU buffers: the graph's outputs are still in the gallocr buffer.)
static void keep_kda_rows(const std::vector<KdaSnapshots> & snaps, const HParams & hp, int64_t n, int64_t n_keep) {
    const int64_t d = hp.kda_head_dim, nh = hp.n_head, inner = hp.kda_inner(), K = hp.ssm_conv_kernel;
    for (const KdaSnapshots & s : snaps) {
        const float * state = (const float *) s.packed->data + d * nh * n + (n - n_keep) * d * d * nh;
        std::memcpy(s.cache->state->data, state, d * d * nh * sizeof(float));
        for (int part = 0; part < 3; ++part) {
            for (int64_t ch = 0; ch < inner; ++ch) {
                std::memcpy((char *) s.cache->conv->data + (part * inner + ch) * s.cache->conv->nb[1],
                            (const char *) s.xt[part]->data + ch * s.xt[part]->nb[1] + n_keep * s.xt[part]->nb[0],
                            (K - 1) * sizeof(float));
            }
        }
    }
}

void Engine::check_tokens(const int32_t * tokens, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || (uint32_t) tokens[i] >= model_.hp.n_vocab) {
            throw std::invalid_argument("token id " + std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
                                        std::to_string(model_.hp.n_vocab) + ")");
        }
    }
}

void Engine::eval_ubatch(const int32_t * tokens, int64_t n, bool logits_all, EvalOutput & out, int64_t row0,
                         const KeepRows * keep) {
    const HParams & hp = model_.hp;
    GraphContext gc(meta_);
    TrunkGraph g;
    build_trunk_graph(g, gc.ctx, model_, cache_, n, logits_all, keep != nullptr);
    alloc(g.gf);
    ggml_backend_tensor_set(g.inp_tokens, tokens, 0, n * sizeof(int32_t));
    set_row_scale(g.inp_row_scale, g.params.kpool, n);
    compute(g.gf);

    ggml_backend_tensor_get(g.hidden, out.hidden.data() + row0 * hp.n_embd, 0, n * hp.n_embd * sizeof(float));
    if (logits_all) {
        ggml_backend_tensor_get(g.logits, out.logits.data() + row0 * hp.n_vocab, 0, n * hp.n_vocab * sizeof(float));
    } else if (row0 + n == out.n_tokens) {
        ggml_backend_tensor_get(g.logits, out.logits.data(), 0, hp.n_vocab * sizeof(float));
    }
    if (out.pools.empty()) {
        out.dsa_layers = g.dsa_layers;
        out.pools.resize(g.selections.size());
    }
    const int64_t k = n_top_pool();
    for (size_t i = 0; i < g.selections.size(); ++i) {
        auto & dst = out.pools[i];
        dst.resize((row0 + n) * k);
        ggml_backend_tensor_get(g.selections[i], dst.data() + row0 * k, 0, n * k * sizeof(int32_t));
    }
    int64_t n_keep = n;
    if (keep) {
        n_keep = (*keep)(out);
        if (n_keep < 1 || n_keep > n) {
            throw std::logic_error("verify: keep " + std::to_string(n_keep) + " of " + std::to_string(n) + " rows");
        }
        if (n_keep < n) keep_kda_rows(g.snapshots, hp, n, n_keep);
    }
    cache_.n_past += (uint32_t) n_keep;  // attention rows past n_past are dropped: rewritten before read
    tokens_.insert(tokens_.end(), tokens, tokens + n_keep);
}

void Engine::draft_rows(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0,
                        const int32_t * saved_pools, int64_t saved_p0, DraftOutput & out) {
    const HParams & hp = model_.hp;
    if (!draft_cache_) {
        throw std::invalid_argument(model_.path + ": no NextN layer to draft with (nextn_predict_layers = 0, no -md file)");
    }
    if (n < 1 || pos0 < 0 || pos0 > draft_cache_->n_past || pos0 + n > draft_cache_->n_ctx()) {
        throw std::invalid_argument("draft rows [" + std::to_string(pos0) + ", " + std::to_string(pos0 + n) +
                                    ") do not follow the " + std::to_string(draft_cache_->n_past) +
                                    " rows written, or exceed n_ctx = " + std::to_string(draft_cache_->n_ctx()));
    }
    if (saved_pools && (n != 1 || saved_p0 < 0 || saved_p0 >= pos0)) {
        throw std::invalid_argument("a step that reuses a selection is one row after the row that made it");
    }
    check_tokens(next_tokens, n);
    for (int64_t row0 = 0; row0 < n; row0 += params_.n_batch) {
        const int64_t m = std::min<int64_t>(params_.n_batch, n - row0);
        GraphContext gc(meta_);
        DraftGraph g;
        build_draft_graph(g, gc.ctx, draft_model_, draft_weights_->layer(), *draft_cache_, pos0 + row0, m,
                          saved_pools ? saved_p0 : -1);
        alloc(g.gf);
        ggml_backend_tensor_set(g.inp_hidden, hidden + row0 * hp.n_embd, 0, m * hp.n_embd * sizeof(float));
        ggml_backend_tensor_set(g.inp_tokens, next_tokens + row0, 0, m * sizeof(int32_t));
        if (g.inp_saved_pools) {
            ggml_backend_tensor_set(g.inp_saved_pools, saved_pools, 0, n_top_pool() * sizeof(int32_t));
        }
        set_row_scale(g.inp_row_scale, saved_pools ? g.params.kpool_saved : g.params.kpool, m);
        compute(g.gf);
        draft_cache_->n_past = (uint32_t) (pos0 + row0 + m);
        if (row0 + m == n) {  // the inputs are in the graph by now: out may be written, even if hidden is out.z
            out.logits.resize(hp.n_vocab);
            out.z.resize(hp.n_embd);
            out.pools.resize(n_top_pool());
            ggml_backend_tensor_get(g.logits, out.logits.data(), 0, hp.n_vocab * sizeof(float));
            ggml_backend_tensor_get(g.z, out.z.data(), 0, hp.n_embd * sizeof(float));
            if (g.pools) {
                ggml_backend_tensor_get(g.pools, out.pools.data(), (m - 1) * n_top_pool() * sizeof(int32_t),
                                        n_top_pool() * sizeof(int32_t));
            } else {
                std::copy(saved_pools, saved_pools + n_top_pool(), out.pools.begin());
            }
        }
    }
}

}  // namespace glm5next
