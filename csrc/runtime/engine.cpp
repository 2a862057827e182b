#include "runtime/engine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "graph/draft_head.h"
#include "graph/select_ops.h"
#include "graph/trunk.h"
#include "runtime/graph_threads.h"
#include "model/kernel_limits.h"

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
    if (params.n_batch == 0) throw std::invalid_argument("n_batch must be >= 1");
    if (params.n_seq_max == 0) throw std::invalid_argument("n_seq_max must be >= 1");
    return params;
}

Engine::Engine(const Model & model, const EngineParams & params, const Model * draft_model)
    : model_(model), draft_model_(checked_draft_model(model, draft_model)), params_(checked_params(params)) {
    if (model.draft_only) {
        throw std::invalid_argument(model.path + ": a draft-only (--mtp-only) file has no trunk to run");
    }
    if (params_.n_threads <= 0) {
        params_.n_threads = (int) std::max(1u, std::thread::hardware_concurrency());
    }
    if (draft_model_.hp.n_nextn > 0) {
        draft_weights_ = std::make_unique<DraftWeights>(draft_model_, params.draft_type);
    } else if (params.draft_type != GGML_TYPE_COUNT) {
        throw std::invalid_argument(model.path + ": a draft type was given but the file has no NextN layer");
    }
    cache_cells_ = std::make_unique<CacheCells>(model_, 0, model_.hp.n_trunk(), params_.n_seq_max);
    if (draft_weights_) {
        draft_cache_cells_ = std::make_unique<CacheCells>(draft_model_, draft_model_.hp.n_trunk(), 1, params_.n_seq_max);
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
    pin_unsupported_kernels(devices);
    one_pass_ = trunk_in_one_pass(model_);
    graphs_ = std::make_unique<GraphSlots>(backends_, cpu_, graph_size(model.hp), pins_);
    last_ = &graphs_->of(GraphShape{GraphShape::kTrunk, {PartShape{0, params_.n_batch}}});
}

void Engine::pin_unsupported_kernels(const std::vector<ggml_backend_dev_t> & devices) {
    const int64_t head = model_.hp.kda_head_dim;
    if (head == 0) return;  // no KDA layer
    for (ggml_backend_dev_t dev : devices) {
        const std::string backend = kernel_backend(dev);
        if (runs_gated_delta_net(backend, head)) continue;
        pins_.no_gated_delta_net.push_back(dev);
        cpu_pinned_ops_.push_back(std::string(ggml_backend_dev_name(dev)) + ": KDA's gated_delta_net (head size " +
                                  std::to_string(head) + ") runs on the CPU: " + backend +
                                  "'s kernel takes head sizes 16, 32, 64 and 128 only");
    }
}

Engine::~Engine() {
    graphs_.reset();
    for (ggml_backend_t b : backends_) ggml_backend_free(b);
}

// A full ubatch at the end of the context, and where its dense attention is largest (graph/blocks.h,
// max_dense_keys): the scheduler keeps the larger buffers of the two. Then the few-row slots (decode steps, verify
// passes, draft steps) at the end of the context, for the rows they usually have; the other row counts, and the
// graphs of several sequences, are allocated on first use.
void Engine::reserve(const Sequence & seq) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    const int64_t n_ctx = seq.n_ctx();
    if (n_ctx <= reserved_n_ctx_) return;
    reserved_n_ctx_ = (uint32_t) n_ctx;
    const int64_t rows = std::min<int64_t>(params_.n_batch, n_ctx);
    const int64_t dense_end = std::min<int64_t>(n_ctx, max_dense_keys(model_.hp));
    const std::string what = "n_batch = " + std::to_string(params_.n_batch) + " and n_ctx = " + std::to_string(n_ctx);
    auto reserve_trunk = [&](PartShape shape, int64_t n_past, const std::string & why) {
        shape.sequence = seq.id();
        TrunkRows r{seq.cache().view(), shape.n_rows, shape.all_logits, shape.snapshots};
        r.cache.n_past = n_past;
        GraphSlot & slot = graphs_->of(GraphShape{GraphShape::kTrunk, {shape}});
        slot.reserve<TrunkGraph>([&](TrunkGraph & g, ggml_context * ctx) { build_trunk_graph(g, ctx, model_, {r}); },
                                 why);
    };
    for (int64_t n_past : {dense_end - rows, n_ctx - rows}) {
        if (n_past >= 0) reserve_trunk(PartShape{0, rows, true, false}, n_past, what);
    }
    const int64_t few = std::clamp<int64_t>(params_.n_verify_rows, 1, std::min<int64_t>({kGatherMaxRows, params_.n_batch, n_ctx}));
    for (int64_t n : {int64_t(1), few}) {
        // the class verify() asks for (all logits, KDA snapshots): reserved under another, the buffers sized here
        // would serve no generation, and its first verify of each row count would allocate again
        reserve_trunk(PartShape{0, n, true, true}, n_ctx - n,
                      "verify passes of " + std::to_string(n) + " rows and n_ctx = " + std::to_string(n_ctx));
    }
    if (!seq.draft_cache()) return;
    for (const auto & [n, shared] : {std::pair{int64_t(1), true}, std::pair{few, false}}) {
        DraftRows r{seq.draft_cache()->view(), n, shared, true};
        r.cache.n_past = n_ctx - n;
        GraphSlot & slot = graphs_->of(
            GraphShape{GraphShape::kDraft, {PartShape{seq.id(), n, false, false, shared, true}}});
        slot.reserve<DraftGraph>(
            [&](DraftGraph & g, ggml_context * ctx) {
                build_draft_graph(g, ctx, draft_model_, draft_weights_->layer(), {r});
            },
            "the draft head's steps and n_ctx = " + std::to_string(n_ctx));
    }
}

uint64_t Engine::attach(const Sequence * seq) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    sequences_.push_back(seq);
    return next_sequence_id_++;
}

int Engine::n_splits() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return ggml_backend_sched_get_n_splits(last_->sched());
}

GraphTraffic Engine::traffic() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return {n_splits(), last_->bytes_copied(), last_->copy_seconds()};
}

int64_t Engine::n_graphs_built() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return graphs_->n_built();
}

void Engine::detach(const Sequence * seq) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    sequences_.erase(std::remove(sequences_.begin(), sequences_.end(), seq), sequences_.end());
    graphs_->buffers_changed();  // its caches' buffers are freed (on the devices of their layers)
}

void Engine::release_snapshots(const GraphSlot * slot) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    graphs_->unpin(slot);
}

std::vector<DeviceMemory> Engine::memory() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
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
    for (const Sequence * seq : sequences_) {
        for (const SeqCache * c : {&seq->cache(), seq->draft_cache()}) {
            if (c == nullptr) continue;
            for (const auto & [dev, n] : c->bytes_by_device()) by_dev[dev].caches += n;
        }
    }
    for (const CacheCells * cells : {cache_cells_.get(), draft_cache_cells_.get()}) {
        if (cells == nullptr) continue;
        for (const auto & [dev, n] : cells->free_bytes_by_device()) by_dev[dev].caches += n;
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

void Engine::profile_ops(bool on) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (on && profile_traffic_) {  // the scheduler has one eval callback: one timer at a time
        throw std::invalid_argument("profile_ops: profile_traffic is on (one of the two at a time)");
    }
    if (!on) {
        op_profile_.reset();
    } else if (!op_profile_) {
        op_profile_.emplace();
    }
}

GraphOpTimes * Engine::op_times(const GraphShape & shape) {
    return op_profile_ ? &(*op_profile_)[graph_kind(shape)] : nullptr;
}

OpProfile Engine::op_profile() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return op_profile_ ? *op_profile_ : OpProfile{};
}

void Engine::census_graphs(bool on, int cuda_cc) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    census_cuda_cc_ = cuda_cc;
    if (!on) {
        census_.reset();
    } else if (!census_) {
        census_.emplace();
    }
}

std::map<std::string, GraphCensus> Engine::graph_census() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return census_ ? *census_ : std::map<std::string, GraphCensus>{};
}

void Engine::count(const GraphSlot & slot, ggml_cgraph * gf, const GraphShape & shape, const GraphParts & parts,
                   int64_t readbacks) {
    if (!census_) return;
    GraphCensus c = take_census(slot.sched(), gf, census_cuda_cc_);
    c.row_groups = (int64_t) parts.groups.size();
    c.parts = (int64_t) parts.parts.size();
    c.readbacks = readbacks;
    (*census_)[graph_kind(shape)] = std::move(c);
}

void Engine::profile_traffic(bool on) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (on && op_profile_) {
        throw std::invalid_argument("profile_traffic: profile_ops is on (one of the two at a time)");
    }
    profile_traffic_ = on;
    graphs_->clear();  // a graph allocated with it off did not count its bytes
}

void Engine::check_tokens(const int32_t * tokens, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || (uint32_t) tokens[i] >= model_.hp.n_vocab) {
            throw std::invalid_argument("token id " + std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
                                        std::to_string(model_.hp.n_vocab) + ")");
        }
    }
}

namespace {

// The order parts take in a graph: those of at most kGatherMaxRows rows first (the few-row group), in the order
// given, then the longer ones (graph/parts.h).
template <typename Part>
std::vector<size_t> graph_order(const std::vector<Part> & parts) {
    std::vector<size_t> order;
    for (int pass = 0; pass < 2; ++pass) {
        for (size_t i = 0; i < parts.size(); ++i) {
            if ((parts[i].n > kGatherMaxRows) == (pass == 1)) order.push_back(i);
        }
    }
    return order;
}

// ggml_backend_tensor_get of an output's bytes [offset, offset + size), counted in `readbacks` when it waits for a
// device (graph_census.h).
void read_output(const ggml_tensor * t, void * dst, size_t offset, size_t size, int64_t & readbacks) {
    ggml_backend_tensor_get(t, dst, offset, size);
    readbacks += reads_device_memory(t) ? 1 : 0;
}

// A row group's output (its hidden rows, logits, a draft step's z) as its parts read it: in device memory the whole
// tensor is read once, at the first part's read (one wait for the device per group, not one per sequence); in host
// memory each part's bytes are read where they are.
class GroupOutput {
public:
    GroupOutput(const ggml_tensor * t, int64_t & readbacks) : t_(t), readbacks_(readbacks) {}
    void read(void * dst, size_t offset, size_t size) {
        if (!reads_device_memory(t_)) {
            read_output(t_, dst, offset, size, readbacks_);
            return;
        }
        if (host_.empty()) {
            host_.resize(ggml_nbytes(t_));
            read_output(t_, host_.data(), 0, host_.size(), readbacks_);
        }
        std::memcpy(dst, host_.data() + offset, size);
    }

private:
    const ggml_tensor * t_;
    int64_t & readbacks_;
    std::vector<char> host_;
};

template <typename Part>
void check_distinct(const std::vector<Part> & parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
            if (parts[i].seq == parts[j].seq) throw std::invalid_argument("a sequence appears twice in one ubatch");
        }
    }
}

}  // namespace

void Engine::run_trunk(const std::vector<TrunkPart> & parts) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    const HParams & hp = model_.hp;
    if (parts.empty()) throw std::invalid_argument("run_trunk: no rows");
    check_distinct(parts);
    for (const TrunkPart & p : parts) {
        if (&p.seq->engine() != this) throw std::invalid_argument("run_trunk: a sequence of another engine");
        p.seq->check_no_pending_verify();
        if (p.n < 1 || p.n > params_.n_batch || p.seq->n_past() + p.n > p.seq->n_ctx()) {
            throw std::invalid_argument(std::to_string(p.n) + " rows must be >= 1, fit one ubatch (n_batch = " +
                                        std::to_string(params_.n_batch) + ") and the context (" +
                                        std::to_string(p.seq->n_past()) + " of n_ctx = " + std::to_string(p.seq->n_ctx()) +
                                        " rows used)");
        }
        check_tokens(p.tokens, p.n);
    }
    const std::vector<size_t> order = graph_order(parts);
    GraphShape shape{GraphShape::kTrunk, {}};
    std::vector<int32_t> tokens;
    std::vector<int64_t> n_past;
    for (size_t i : order) {
        const TrunkPart & p = parts[i];
        const SeqCache & c = p.seq->cache();
        shape.parts.push_back(PartShape{p.seq->id(), p.n, p.all_logits, p.verify, false, true,
                                        graph_layout(hp, c.n_ctx(), c.n_past(), p.n)});
        tokens.insert(tokens.end(), p.tokens, p.tokens + p.n);
        n_past.push_back(c.n_past());
    }
    GraphSlot & slot = graphs_->of(shape);
    last_ = &slot;  // (of() may have replaced the slot last_ was)
    TrunkGraph * reused = slot.trunk(shape);
    if (reused == nullptr) {
        std::vector<TrunkRows> rows;
        for (size_t i : order) {
            const TrunkPart & p = parts[i];
            rows.push_back(TrunkRows{p.seq->cache().view(), p.n, p.all_logits, p.verify});
        }
        reused = &slot.build<TrunkGraph>(
            shape, [&](TrunkGraph & g, ggml_context * ctx) { build_trunk_graph(g, ctx, model_, rows); },
            profile_traffic_);
    }
    TrunkGraph & g = *reused;
    g.set_inputs(tokens.data(), n_past);
    note_graph_thread(params_.n_threads);
    slot.compute(profile_traffic_, op_times(shape));

    const int64_t k = n_top_pool();
    int64_t readbacks = 0;
    size_t part_index = 0, group_index = 0;
    for (const RowGroup & group : g.parts.groups) {
        GroupOutput hidden(g.hidden[group_index], readbacks), logits(g.logits[group_index], readbacks);
        for (const GraphPart * gp : group.parts) {
            const TrunkPart & p = parts[order[part_index++]];
            EvalOutput & out = *p.out;
            const int64_t n = p.n, row0 = p.out_row0;
            hidden.read(out.hidden.data() + row0 * hp.n_embd, gp->row0 * hp.n_embd * sizeof(float),
                        n * hp.n_embd * sizeof(float));
            const size_t logits_at = gp->out_row0 * hp.n_vocab * sizeof(float);
            if (p.all_logits) {
                logits.read(out.logits.data() + row0 * hp.n_vocab, logits_at, n * hp.n_vocab * sizeof(float));
            } else if (row0 + n == out.n_tokens) {
                logits.read(out.logits.data(), logits_at, hp.n_vocab * sizeof(float));
            }
            if (p.selections && out.pools.empty()) {
                out.dsa_layers = g.dsa_layers;
                out.pools.resize(gp->selections.size());
            }
            for (size_t i = 0; p.selections && i < gp->selections.size(); ++i) {
                std::vector<int32_t> & dst = out.pools[i];
                dst.resize((row0 + n) * k);
                const GraphPart::Selected & sel = gp->selections[i];
                read_output(sel.pools, dst.data() + row0 * k, sel.row0 * k * sizeof(int32_t), n * k * sizeof(int32_t),
                            readbacks);
                for (int64_t t = 0; t < n; ++t) canonical_pools(gp->kpool, dst.data() + (row0 + t) * k, k, t);
            }
            if (p.verify) {
                graphs_->pin(&slot);
                p.seq->began_verify(gp->snapshots, p.tokens, n, out.hidden.data() + row0 * hp.n_embd, &slot);
            } else {
                p.seq->appended(p.tokens, n, out.hidden.data() + (row0 + n - 1) * hp.n_embd);
            }
        }
        ++group_index;
    }
    count(slot, g.gf, shape, g.parts, readbacks);
}

void Engine::run_draft(const std::vector<DraftPart> & parts) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    const HParams & hp = model_.hp;
    if (!draft_weights_) {
        throw std::invalid_argument(model_.path + ": no NextN layer to draft with (nextn_predict_layers = 0, no -md file)");
    }
    if (parts.empty()) throw std::invalid_argument("run_draft: no rows");
    check_distinct(parts);
    for (const DraftPart & p : parts) {
        if (&p.seq->engine() != this) throw std::invalid_argument("run_draft: a sequence of another engine");
        p.seq->check_no_pending_verify();
        const SeqCache & c = *p.seq->draft_cache();
        if (p.n < 1 || p.n > params_.n_batch || p.pos0 < 0 || p.pos0 > c.n_past() || p.pos0 + p.n > c.n_ctx()) {
            throw std::invalid_argument("draft rows [" + std::to_string(p.pos0) + ", " + std::to_string(p.pos0 + p.n) +
                                        ") do not follow the " + std::to_string(c.n_past()) +
                                        " rows written, fit one ubatch (n_batch = " + std::to_string(params_.n_batch) +
                                        ") or n_ctx = " + std::to_string(c.n_ctx()));
        }
        if (p.saved_pools && (p.n != 1 || p.saved_p0 < 0 || p.saved_p0 >= p.pos0)) {
            throw std::invalid_argument("a step that reuses a selection is one row after the row that made it");
        }
        check_tokens(p.tokens, p.n);
    }
    for (const DraftPart & p : parts) p.seq->draft_begin(p.pos0, p.n, p.from_trunk);

    const std::vector<size_t> order = graph_order(parts);
    GraphShape shape{GraphShape::kDraft, {}};
    std::vector<float> hidden;
    std::vector<int32_t> tokens;
    std::vector<int64_t> pos0, saved_p0;
    std::vector<const int32_t *> saved;
    for (size_t i : order) {
        const DraftPart & p = parts[i];
        const SeqCache & c = *p.seq->draft_cache();
        shape.parts.push_back(PartShape{p.seq->id(), p.n, false, false, p.saved_pools != nullptr, p.out != nullptr,
                                        graph_layout(draft_model_.hp, c.n_ctx(), p.pos0, p.n)});
        hidden.insert(hidden.end(), p.hidden, p.hidden + p.n * hp.n_embd);
        tokens.insert(tokens.end(), p.tokens, p.tokens + p.n);
        pos0.push_back(p.pos0);
        saved.push_back(p.saved_pools);
        saved_p0.push_back(p.saved_pools ? p.saved_p0 : -1);
    }
    GraphSlot & slot = graphs_->of(shape);
    last_ = &slot;
    DraftGraph * reused = slot.draft(shape);
    if (reused == nullptr) {
        std::vector<DraftRows> rows;
        for (size_t i : order) {
            const DraftPart & p = parts[i];
            rows.push_back(DraftRows{p.seq->draft_cache()->view(), p.n, p.saved_pools != nullptr, p.out != nullptr});
        }
        reused = &slot.build<DraftGraph>(
            shape,
            [&](DraftGraph & g, ggml_context * ctx) {
                build_draft_graph(g, ctx, draft_model_, draft_weights_->layer(), rows);
            },
            profile_traffic_);
    }
    DraftGraph & g = *reused;
    g.set_inputs(hidden.data(), tokens.data(), pos0, saved, saved_p0);  // hidden is copied: out may be written now
    note_graph_thread(params_.n_threads);
    slot.compute(profile_traffic_, op_times(shape));

    int64_t readbacks = 0;
    size_t part_index = 0, group_index = 0;
    for (const RowGroup & group : g.parts.groups) {
        GroupOutput logits(g.logits[group_index], readbacks), z(g.z[group_index], readbacks);
        // the group's pools where it selected at once (every part's in one tensor): read as its other outputs
        const ggml_tensor * group_pools = g.pools[part_index].pools;
        for (size_t j = 1; j < group.parts.size() && group_pools; ++j) {
            if (g.pools[part_index + j].pools != group_pools) group_pools = nullptr;
        }
        std::optional<GroupOutput> pools_at_once;
        if (group.parts.size() > 1 && group_pools) pools_at_once.emplace(group_pools, readbacks);
        for (const GraphPart * gp : group.parts) {
            const size_t i = order[part_index++];
            const DraftPart & p = parts[i];
            p.seq->draft_appended(p.n);
            if (p.out == nullptr) continue;
            DraftOutput & out = *p.out;
            out.logits.resize(hp.n_vocab);
            out.z.resize(hp.n_embd);
            out.pools.resize(n_top_pool());
            logits.read(out.logits.data(), gp->out_row0 * hp.n_vocab * sizeof(float), hp.n_vocab * sizeof(float));
            z.read(out.z.data(), gp->out_row0 * hp.n_embd * sizeof(float), hp.n_embd * sizeof(float));
            if (const GraphPart::Selected & sel = g.pools[part_index - 1]; sel.pools) {
                const size_t at = (sel.row0 + p.n - 1) * n_top_pool() * sizeof(int32_t), bytes = n_top_pool() * sizeof(int32_t);
                if (pools_at_once) {
                    pools_at_once->read(out.pools.data(), at, bytes);
                } else {
                    read_output(sel.pools, out.pools.data(), at, bytes, readbacks);
                }
                canonical_pools(gp->kpool, out.pools.data(), n_top_pool(), p.n - 1);
            } else {
                std::copy(p.saved_pools, p.saved_pools + n_top_pool(), out.pools.begin());
            }
        }
        ++group_index;
    }
    count(slot, g.gf, shape, g.parts, readbacks);
}

}  // namespace glm5next
