#include "runtime/engine.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "graph/draft_head.h"
#include "graph/select_ops.h"
#include "graph/trunk.h"

namespace glm5next {

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

static const EngineParams & checked_params(const EngineParams & params) {
    if (params.n_ctx == 0 || params.n_ctx > kMaxContext) {
        throw std::invalid_argument("n_ctx = " + std::to_string(params.n_ctx) + " is out of range [1, " +
                                    std::to_string(kMaxContext) + "]");
    }
    if (params.n_batch == 0) throw std::invalid_argument("n_batch must be >= 1");
    if (params.checkpoint_every == 0) throw std::invalid_argument("checkpoint_every must be >= 1");
    return params;
}

Engine::Engine(const Model & model, const EngineParams & params, const Model * draft_model)
    : model_(model), draft_model_(checked_draft_model(model, draft_model)), params_(checked_params(params)),
      cache_(model, 0, model.hp.n_trunk(), params.n_ctx), checkpoints_(params.n_checkpoints) {
    if (params_.n_threads <= 0) {
        params_.n_threads = (int) std::max(1u, std::thread::hardware_concurrency());
    }
    if (draft_model_.hp.n_nextn > 0) {
        draft_cache_ = std::make_unique<SeqCache>(draft_model_, draft_model_.hp.n_trunk(), 1, params.n_ctx);
        draft_weights_ = std::make_unique<DraftWeights>(draft_model_, params.draft_type);
    } else if (params.draft_type != GGML_TYPE_COUNT) {
        throw std::invalid_argument(model.path + ": a draft type was given but the file has no NextN layer");
    }
    // The scheduler's backends: every device holding weights (in placement order), the CPU last (ggml gives
    // lower indices priority; the CPU also runs this project's custom ops, see alloc).
    std::vector<ggml_backend_dev_t> devices = model_.devices();
    for (ggml_backend_dev_t dev : draft_model_.devices()) {
        if (std::find(devices.begin(), devices.end(), dev) == devices.end()) devices.push_back(dev);
    }
    for (ggml_backend_dev_t dev : devices) {
        ggml_backend_t backend = ggml_backend_dev_init(dev, nullptr);
        if (backend == nullptr) throw std::runtime_error(std::string("cannot start device ") + ggml_backend_dev_name(dev));
        backends_.push_back(backend);
    }
    cpu_ = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu_, params_.n_threads);
    backends_.push_back(cpu_);
    graphs_ = std::make_unique<GraphSlots>(backends_, cpu_, graph_size(model.hp));
    last_ = &graphs_->of(GraphShape{GraphShape::kTrunk, params_.n_batch});
    reserve();
}

// Sizes the compute buffers for the largest graph at load, as llama.cpp does, so that memory() reports them and a
// device too small fails here rather than on the first request: a full ubatch whose rows attend the whole
// context (the masked dense pass over n_ctx cached rows).
void Engine::reserve() {
    // a full ubatch at the end of the context, and where its dense attention is largest (graph/blocks.h,
    // max_dense_keys): the scheduler keeps the larger buffers of the two
    const int64_t n_ctx = cache_.n_ctx(), rows = std::min<int64_t>(params_.n_batch, n_ctx);
    const int64_t dense_end = std::min<int64_t>(n_ctx, max_dense_keys(model_.hp));
    const std::string what = "n_batch = " + std::to_string(params_.n_batch) + " and n_ctx = " + std::to_string(n_ctx);
    for (int64_t n_past : {dense_end - rows, n_ctx - rows}) {
        if (n_past < 0) continue;
        CacheView at = cache_.view();
        at.n_past = n_past;
        ggml_context * ctx = nullptr;
        GraphSlot & slot = graphs_->of(GraphShape{GraphShape::kTrunk, rows});
        TrunkGraph & g = slot.new_trunk(&ctx);
        build_trunk_graph(g, ctx, model_, at, rows, true, false);
        slot.reserve(g.gf, what);
    }
    // few-row slots (decode steps, verify passes, draft steps) at the end of the context, for the rows they usually
    // have; the other row counts are allocated on first use
    const int64_t few = std::clamp<int64_t>(params_.n_verify_rows, 1, std::min<int64_t>({kGatherMaxRows, params_.n_batch, n_ctx}));
    for (int64_t n : {int64_t(1), few}) {
        CacheView at = cache_.view();
        at.n_past = n_ctx - n;
        ggml_context * ctx = nullptr;
        // the class verify() asks for (all logits, KDA snapshots): reserved under another, the buffers sized here
        // would serve no generation, and its first verify of each row count would allocate again
        GraphSlot & slot = graphs_->of(GraphShape{GraphShape::kTrunk, n, true, true});
        TrunkGraph & g = slot.new_trunk(&ctx);
        build_trunk_graph(g, ctx, model_, at, n, true, true);
        slot.reserve(g.gf, "verify passes of " + std::to_string(n) + " rows and n_ctx = " + std::to_string(n_ctx));
    }
    if (!draft_cache_) return;
    for (const auto & [n, shared] : {std::pair{int64_t(1), true}, std::pair{few, false}}) {
        CacheView at = draft_cache_->view();
        at.n_past = n_ctx - n;
        ggml_context * ctx = nullptr;
        GraphSlot & slot = graphs_->of(GraphShape{GraphShape::kDraft, n, false, false, shared});
        DraftGraph & g = slot.new_draft(&ctx);
        build_draft_graph(g, ctx, draft_model_, draft_weights_->layer(), at, n, shared);
        slot.reserve(g.gf, "the draft head's steps and n_ctx = " + std::to_string(n_ctx));
    }
}

Engine::~Engine() {
    graphs_.reset();
    for (ggml_backend_t b : backends_) ggml_backend_free(b);
}

std::vector<DeviceMemory> Engine::memory() const {
    std::map<ggml_backend_dev_t, DeviceMemory> by_dev;
    auto add_weights = [&](const Model & m) {
        for (const auto & [name, t] : m.tensors) by_dev[device_of(t)].weights += ggml_nbytes(t);
    };
    add_weights(model_);
    if (&draft_model_ != &model_) add_weights(draft_model_);
    if (draft_weights_) {  // requantized draft tensors: counted where they live, instead of as stored
        for (const auto & [name, type] : draft_weights_->requantized()) {
            const ggml_tensor * stored = draft_model_.tensors.at(name);
            by_dev[device_of(stored)].weights += ggml_row_size(type, stored->ne[0]) * ggml_nrows(stored) - ggml_nbytes(stored);
        }
    }
    const SeqCache * caches[] = {&cache_, draft_cache_.get()};
    for (const SeqCache * c : caches) {
        if (c == nullptr) continue;
        for (const auto & [dev, n] : c->bytes_by_device()) by_dev[dev].caches += n;
    }
    for (ggml_backend_t b : backends_) {
        for (const GraphSlot * slot : graphs_->all()) {
            by_dev[ggml_backend_get_device(b)].compute += ggml_backend_sched_get_buffer_size(slot->sched(), b);
        }
    }
    std::vector<DeviceMemory> out;  // in the scheduler's order: the placed devices, the CPU last
    for (ggml_backend_t b : backends_) {
        ggml_backend_dev_t dev = ggml_backend_get_device(b);
        by_dev[dev].device = ggml_backend_dev_name(dev);
        out.push_back(by_dev[dev]);
    }
    return out;
}

void Engine::profile_traffic(bool on) {
    profile_traffic_ = on;
    graphs_->clear();  // a graph allocated with it off did not count its bytes
}

EvalOutput Engine::eval(const std::vector<int32_t> & tokens, bool logits_all) {
    const HParams & hp = model_.hp;
    check_no_pending_verify();
    if (tokens.empty()) {
        throw std::invalid_argument("eval: no tokens");
    }
    check_tokens(tokens.data(), (int64_t) tokens.size());
    if (cache_.n_past() + tokens.size() > cache_.n_ctx()) {
        throw std::invalid_argument("eval: " + std::to_string(cache_.n_past() + tokens.size()) +
                                    " tokens exceed the context size n_ctx = " + std::to_string(cache_.n_ctx()));
    }
    EvalOutput out;
    out.n_tokens = (int64_t) tokens.size();
    out.n_logit_rows = logits_all ? out.n_tokens : 1;
    out.logits.resize(out.n_logit_rows * hp.n_vocab);
    out.hidden.resize(out.n_tokens * hp.n_embd);
    const int64_t every = params_.checkpoint_every;
    for (int64_t row0 = 0, n = 0; row0 < out.n_tokens; row0 += n) {
        // a ubatch ends at every multiple of checkpoint_every, where a checkpoint is kept
        n = std::min<int64_t>({params_.n_batch, out.n_tokens - row0, every - cache_.n_past() % every});
        eval_ubatch(tokens.data() + row0, n, logits_all, out, row0, false);
        cache_.append((uint32_t) n);
        tokens_.insert(tokens_.end(), tokens.begin() + row0, tokens.begin() + row0 + n);
        last_hidden_.assign(out.hidden.begin() + (row0 + n - 1) * hp.n_embd, out.hidden.begin() + (row0 + n) * hp.n_embd);
        if (cache_.n_past() % every == 0) checkpoint();
    }
    return out;
}

void Engine::reset() {
    cache_.clear();
    tokens_.clear();
    pending_tokens_.clear();
    last_hidden_.clear();
    checkpoints_.clear();
    draft_from_trunk_ = 0;
    if (draft_cache_) draft_cache_->clear();
}

std::vector<uint8_t> Engine::save_state() const {
    check_no_pending_verify();
    SequenceState s;
    s.tokens = tokens_;
    s.trunk = cache_.rows();
    s.has_draft = draft_cache_ != nullptr;
    if (draft_cache_) s.draft = draft_cache_->rows();
    s.last_hidden = last_hidden_;
    s.draft_from_trunk = draft_from_trunk_;
    for (size_t i = 0; i < checkpoints_.size(); ++i) s.checkpoints.push_back(checkpoints_.at(i));
    return serialize(s);
}

void Engine::load_state(const uint8_t * data, size_t size) {
    check_no_pending_verify();
    SequenceState s = deserialize(data, size);
    auto misfit = [](const std::string & why) {
        return std::invalid_argument("the saved sequence does not fit this model: " + why);
    };
    cache_.check_rows(s.trunk);
    if (s.tokens.size() != s.trunk.n_past) throw misfit("its token count differs from its trunk rows");
    check_tokens(s.tokens.data(), (int64_t) s.tokens.size());
    if (s.has_draft != (draft_cache_ != nullptr)) {
        throw misfit(s.has_draft ? "it has NextN draft rows and this model no NextN layer"
                                 : "it has no NextN draft rows and this model a NextN layer");
    }
    if (draft_cache_) {
        draft_cache_->check_rows(s.draft);  // drafted rows may run past the trunk's: they are rewritten
    }
    const size_t n_embd = model_.hp.n_embd;
    if (s.last_hidden.size() != (s.trunk.n_past > 0 ? n_embd : 0)) throw misfit("its hidden state's length");
    if (s.draft_from_trunk < 0 || s.draft_from_trunk > (int64_t) s.draft.n_past) throw misfit("its draft row count");
    uint32_t previous = 0;
    for (const Checkpoint & c : s.checkpoints) {
        if (c.n_past() <= previous || c.n_past() > s.trunk.n_past) throw misfit("its checkpoints' rows");
        if (c.trunk.bytes() != cache_.recurrent_bytes() || c.hidden.size() != n_embd ||
            (!c.logits.empty() && c.logits.size() != model_.hp.n_vocab)) {
            throw misfit("a checkpoint's recurrent state, hidden state or logits have another size");
        }
        previous = c.n_past();
    }
    reset();
    cache_.set_rows(s.trunk);
    if (draft_cache_) draft_cache_->set_rows(s.draft);
    tokens_ = std::move(s.tokens);
    last_hidden_ = std::move(s.last_hidden);
    draft_from_trunk_ = s.draft_from_trunk;
    for (Checkpoint & c : s.checkpoints) checkpoints_.add(std::move(c));
}

void Engine::checkpoint(std::vector<float> logits) {
    check_no_pending_verify();
    if (cache_.n_past() == 0) throw std::logic_error("a checkpoint of an empty sequence");
    if (checkpoints_.max_count() == 0) return;
    checkpoints_.add(Checkpoint{cache_.save(), last_hidden_, std::move(logits)});
}

int64_t Engine::common_prefix(const std::vector<int32_t> & prompt) const {
    return std::mismatch(tokens_.begin(), tokens_.end(), prompt.begin(), prompt.end()).first - tokens_.begin();
}

int64_t Engine::draft_rows_end() const {
    // the draft head's row c-1 is rewritten with the token after it; the rows before it must be the trunk's
    return draft_cache_ ? std::min<int64_t>(draft_from_trunk_, draft_cache_->n_past()) + 1 : INT64_MAX;
}

int64_t Engine::resumable(const std::vector<int32_t> & prompt, bool draft_rows) const {
    const int64_t common = common_prefix(prompt);
    return draft_rows ? std::min(common, draft_rows_end()) : common;
}

int64_t Engine::resume(const std::vector<int32_t> & prompt, bool draft_rows, std::vector<float> & hidden,
                       std::vector<float> & logits) {
    check_no_pending_verify();
    logits.clear();
    const int64_t n = (int64_t) prompt.size();
    const int64_t common = common_prefix(prompt), draft_bound = draft_rows ? draft_rows_end() : INT64_MAX;
    const Checkpoint * whole = common == n && n <= draft_bound ? checkpoints_.with_logits_at(n) : nullptr;
    const int64_t bound = std::min<int64_t>({common, n - 1, draft_bound});
    const int64_t n_past = cache_.n_past();
    if (whole == nullptr && n_past >= 1 && n_past <= bound) {  // the sequence as it is: nothing to restore
        hidden = last_hidden_;
        return n_past;
    }
    const Checkpoint * c = whole ? whole : checkpoints_.newest_at_or_before(bound);
    if (c == nullptr) {
        reset();
        hidden.clear();
        return 0;
    }
    cache_.restore(c->trunk);
    tokens_.resize(c->n_past());
    last_hidden_ = c->hidden;
    if (whole) logits = c->logits;
    checkpoints_.drop_after(c->n_past());
    draft_from_trunk_ = std::min<int64_t>(draft_from_trunk_, c->n_past() - 1);
    hidden = last_hidden_;
    return c->n_past();
}

void Engine::verify(const std::vector<int32_t> & tokens, EvalOutput & out) {
    check_no_pending_verify();
    const int64_t n = (int64_t) tokens.size();
    if (n == 0 || n > params_.n_batch || cache_.n_past() + n > cache_.n_ctx()) {
        throw std::invalid_argument("verify: " + std::to_string(n) + " rows must be >= 1, fit one ubatch (n_batch = " +
                                    std::to_string(params_.n_batch) + ") and the context");
    }
    check_tokens(tokens.data(), n);
    out.n_tokens = out.n_logit_rows = n;
    out.logits.resize(n * model_.hp.n_vocab);
    out.hidden.resize(n * model_.hp.n_embd);
    cache_.begin_verify(eval_ubatch(tokens.data(), n, true, out, 0, true), (uint32_t) n);
    pending_tokens_ = tokens;
    pending_hidden_ = out.hidden;
}

void Engine::commit(int64_t n_keep) {
    if (n_keep < 1 || n_keep > (int64_t) pending_tokens_.size()) {
        throw std::logic_error("commit: keep " + std::to_string(n_keep) + " of the " +
                               std::to_string(pending_tokens_.size()) + " rows of the pending verify pass");
    }
    cache_.commit((uint32_t) n_keep);
    tokens_.insert(tokens_.end(), pending_tokens_.begin(), pending_tokens_.begin() + n_keep);
    const int64_t n_embd = model_.hp.n_embd;
    last_hidden_.assign(pending_hidden_.begin() + (n_keep - 1) * n_embd, pending_hidden_.begin() + n_keep * n_embd);
    pending_tokens_.clear();
}

void Engine::check_no_pending_verify() const {
    if (cache_.verify_pending()) {
        throw std::logic_error("a verify pass awaits its commit: call commit(n_keep) first");
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

std::vector<KdaSnapshots> Engine::eval_ubatch(const int32_t * tokens, int64_t n, bool logits_all, EvalOutput & out,
                                              int64_t row0, bool snapshots) {
    const HParams & hp = model_.hp;
    const int64_t n_past = cache_.n_past();
    const GraphShape shape{GraphShape::kTrunk, n, logits_all, snapshots, false,
                           graph_layout(hp, cache_.n_ctx(), n_past, n)};
    GraphSlot & slot = graphs_->of(shape);
    TrunkGraph * reused = slot.trunk(shape);
    if (reused == nullptr) {
        ggml_context * ctx = nullptr;
        reused = &slot.new_trunk(&ctx);
        build_trunk_graph(*reused, ctx, model_, cache_.view(), n, logits_all, snapshots);
        slot.alloc(reused->gf, shape, profile_traffic_);
    }
    TrunkGraph & g = *reused;
    g.set_inputs(tokens, n_past);
    last_ = &slot;
    slot.compute(profile_traffic_);

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
        for (int64_t t = 0; t < n; ++t) canonical_pools(g.params.kpool, dst.data() + (row0 + t) * k, k, t);
    }
    return g.snapshots;
}

void Engine::draft_rows(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0,
                        const int32_t * saved_pools, int64_t saved_p0, bool from_trunk, DraftOutput & out) {
    const HParams & hp = model_.hp;
    check_no_pending_verify();
    if (!draft_cache_) {
        throw std::invalid_argument(model_.path + ": no NextN layer to draft with (nextn_predict_layers = 0, no -md file)");
    }
    if (n < 1 || pos0 < 0 || pos0 > draft_cache_->n_past() || pos0 + n > draft_cache_->n_ctx()) {
        throw std::invalid_argument("draft rows [" + std::to_string(pos0) + ", " + std::to_string(pos0 + n) +
                                    ") do not follow the " + std::to_string(draft_cache_->n_past()) +
                                    " rows written, or exceed n_ctx = " + std::to_string(draft_cache_->n_ctx()));
    }
    if (saved_pools && (n != 1 || saved_p0 < 0 || saved_p0 >= pos0)) {
        throw std::invalid_argument("a step that reuses a selection is one row after the row that made it");
    }
    check_tokens(next_tokens, n);
    draft_cache_->truncate((uint32_t) pos0);  // rows after the ones written now are dropped
    draft_from_trunk_ = from_trunk && draft_from_trunk_ >= pos0 ? pos0 + n : std::min<int64_t>(draft_from_trunk_, pos0);
    for (int64_t row0 = 0; row0 < n; row0 += params_.n_batch) {
        const int64_t m = std::min<int64_t>(params_.n_batch, n - row0);
        const int64_t pos = draft_cache_->n_past();
        const GraphShape shape{GraphShape::kDraft, m, false, false, saved_pools != nullptr,
                               graph_layout(draft_model_.hp, draft_cache_->n_ctx(), pos, m)};
        GraphSlot & slot = graphs_->of(shape);
        DraftGraph * reused = slot.draft(shape);
        if (reused == nullptr) {
            ggml_context * ctx = nullptr;
            reused = &slot.new_draft(&ctx);
            build_draft_graph(*reused, ctx, draft_model_, draft_weights_->layer(), draft_cache_->view(), m,
                              saved_pools != nullptr);
            slot.alloc(reused->gf, shape, profile_traffic_);
        }
        DraftGraph & g = *reused;
        g.set_inputs(hidden + row0 * hp.n_embd, next_tokens + row0, pos, saved_pools, saved_pools ? saved_p0 : -1);
        last_ = &slot;
        slot.compute(profile_traffic_);
        draft_cache_->append((uint32_t) m);
        if (row0 + m == n) {  // the inputs are in the graph by now: out may be written, even if hidden is out.z
            out.logits.resize(hp.n_vocab);
            out.z.resize(hp.n_embd);
            out.pools.resize(n_top_pool());
            ggml_backend_tensor_get(g.logits, out.logits.data(), 0, hp.n_vocab * sizeof(float));
            ggml_backend_tensor_get(g.z, out.z.data(), 0, hp.n_embd * sizeof(float));
            if (g.pools) {
                ggml_backend_tensor_get(g.pools, out.pools.data(), (m - 1) * n_top_pool() * sizeof(int32_t),
                                        n_top_pool() * sizeof(int32_t));
                canonical_pools(g.params.kpool, out.pools.data(), n_top_pool(), m - 1);
            } else {
                std::copy(saved_pools, saved_pools + n_top_pool(), out.pools.begin());
            }
        }
    }
}

}  // namespace glm5next
