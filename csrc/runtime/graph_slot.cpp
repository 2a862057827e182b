#include "runtime/graph_slot.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "model/model.h"
#include "runtime/op_profile.h"
#include "runtime/traffic.h"

namespace glm5next {

bool GraphShape::has_long_part() const {
    return std::any_of(parts.begin(), parts.end(), [](const PartShape & p) { return p.n_rows > kGatherMaxRows; });
}

GraphShape GraphShape::slot_class() const {
    GraphShape out = *this;
    for (PartShape & p : out.parts) {
        p.layout = GraphLayout{};
        p.sequence = 0;
    }
    return out;
}

GraphSlot::GraphSlot(std::vector<ggml_backend_t> & backends, ggml_backend_t cpu, size_t n_nodes, BufferEpoch & epoch,
                     const CpuPins & pins)
    : epoch_(epoch), pins_(pins), backends_(backends), cpu_(cpu), n_nodes_(n_nodes), several_(backends.size() > 1),
      meta_size_(ggml_tensor_overhead() * n_nodes * 2 + ggml_graph_overhead_custom(n_nodes, false)),
      meta_(new uint8_t[meta_size_]) {
    // op_offload off: a weight on the CPU keeps its op on the CPU (placement decides, not batch size).
    sched_ = ggml_backend_sched_new(backends.data(), nullptr, (int) backends.size(), n_nodes, false, false);
}

GraphSlot::~GraphSlot() {
    clear();
    ggml_backend_sched_free(sched_);
    ++epoch_.value;  // its buffers are freed
}

std::vector<size_t> GraphSlot::buffer_sizes() const {
    std::vector<size_t> sizes;
    for (ggml_backend_t b : backends_) sizes.push_back(ggml_backend_sched_get_buffer_size(sched_, b));
    return sizes;
}

template <typename Call>
bool GraphSlot::resizing(Call call) {
    const std::vector<size_t> before = buffer_sizes();
    const bool ok = call();
    if (buffer_sizes() != before) ++epoch_.value;
    return ok;
}

bool GraphSlot::plan(ggml_cgraph * gf) {
    // the last graph's backend assignments and pins are forgotten (its tensors' metadata lived where gf's does now)
    ggml_backend_sched_reset(sched_);
    pin_cpu_ops(gf);
    // (ggml_backend_sched_reserve resets the scheduler after: pins included)
    return resizing([&] { return ggml_backend_sched_reserve(sched_, gf); });
}

void GraphSlot::clear() {
    trunk_.reset();
    draft_.reset();
    shape_ = GraphShape{};
    gf_ = nullptr;
    if (ctx_ != nullptr) ggml_free(ctx_);
    ctx_ = nullptr;
}

ggml_context * GraphSlot::begin() {
    clear();
    ctx_ = ggml_init({meta_size_, meta_.get(), true});
    return ctx_;
}

template <>
std::unique_ptr<TrunkGraph> & GraphSlot::held<TrunkGraph>() {
    return trunk_;
}

template <>
std::unique_ptr<DraftGraph> & GraphSlot::held<DraftGraph>() {
    return draft_;
}

// The device whose memory holds t's data, through views and rows gathered from a cache (a cache's; the states of
// several sequences gathered from the engine's cells, BlockBuilder::delta_rule_over_cells), or null when it has none
// yet.
static ggml_backend_dev_t data_device(const ggml_tensor * t) {
    while (t->view_src != nullptr || t->op == GGML_OP_GET_ROWS) t = t->view_src != nullptr ? t->view_src : t->src[0];
    return t->buffer != nullptr ? device_of(t->buffer) : nullptr;
}

// What runs on the CPU whatever the placement: this project's custom ops (GGML_OP_CUSTOM: graph/select_ops.h,
// graph/mhc_ops.h), which have CPU kernels only, and KDA's gated_delta_net where the device holding its state lacks
// the kernel for the model's head size (CpuPins). ggml's RPC device claims to support every op and ggml-cuda every
// gated_delta_net, so supports_op cannot keep them off a device: they are pinned here.
void GraphSlot::pin_cpu_ops(ggml_cgraph * gf) {
    if (!several_) return;
    const std::vector<ggml_backend_dev_t> & no_gdn = pins_.no_gated_delta_net;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        const bool pinned = node->op == GGML_OP_CUSTOM ||
                            (node->op == GGML_OP_GATED_DELTA_NET && !no_gdn.empty() &&
                             std::find(no_gdn.begin(), no_gdn.end(), data_device(node->src[5])) != no_gdn.end());
        if (pinned) ggml_backend_sched_set_tensor_backend(sched_, node, cpu_);
    }
}

template <typename Graph>
void GraphSlot::reserve(const Builder<Graph> & build, const std::string & what) {
    bool ok = false;
    {
        Graph g;
        build(g, begin());
        ok = plan(g.gf);
    }
    clear();
    if (!ok) throw std::runtime_error("cannot allocate the compute buffers for " + what);
}

template <typename Graph>
Graph & GraphSlot::build(const GraphShape & shape, const Builder<Graph> & build, bool profile) {
    ++n_built_;
    reserve(build, "a graph");  // the twin (see the header)
    ggml_context * ctx = begin();
    std::unique_ptr<Graph> & g = held<Graph>();
    g = std::make_unique<Graph>();
    build(*g, ctx);
    pin_cpu_ops(g->gf);
    const GraphSources sources = profile ? graph_sources(g->gf) : GraphSources{};
    const bool ok = resizing([&] { return ggml_backend_sched_alloc_graph(sched_, g->gf); });
    allocated_at_ = epoch_.value;
    if (!ok) {
        clear();
        throw std::runtime_error("cannot allocate the compute buffers of a graph");
    }
    bytes_copied_ = profile ? glm5next::bytes_copied(sched_, sources) : 0;
    gf_ = g->gf;
    shape_ = shape;
    return *g;
}

template void GraphSlot::reserve<TrunkGraph>(const Builder<TrunkGraph> &, const std::string &);
template void GraphSlot::reserve<DraftGraph>(const Builder<DraftGraph> &, const std::string &);
template TrunkGraph & GraphSlot::build<TrunkGraph>(const GraphShape &, const Builder<TrunkGraph> &, bool);
template DraftGraph & GraphSlot::build<DraftGraph>(const GraphShape &, const Builder<DraftGraph> &, bool);

void GraphSlot::compute(bool profile, GraphOpTimes * ops) {
    std::optional<CopyTimer> timer;
    std::optional<OpTimer> op_timer;
    if (ops != nullptr) {
        op_timer.emplace(sched_, *ops);
    } else if (profile) {
        timer.emplace(sched_);
    }
    if (ggml_backend_sched_graph_compute(sched_, gf_) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("ggml graph computation failed");
    }
    copy_seconds_ = timer ? timer->seconds() : -1.0;
}

GraphSlots::GraphSlots(std::vector<ggml_backend_t> & backends, ggml_backend_t cpu, size_t nodes_per_part,
                       const CpuPins & pins)
    : backends_(backends), cpu_(cpu), nodes_per_part_(nodes_per_part), pins_(pins), batch_(new_slot(1)) {}

std::unique_ptr<GraphSlot> GraphSlots::new_slot(size_t n_parts) {
    return std::make_unique<GraphSlot>(backends_, cpu_, nodes_per_part_ * std::max<size_t>(1, n_parts), epoch_, pins_);
}

bool GraphSlots::pinned(const GraphSlot * slot) const {
    return std::find(pinned_.begin(), pinned_.end(), slot) != pinned_.end();
}

void GraphSlots::pin(const GraphSlot * slot) { pinned_.push_back(slot); }

void GraphSlots::unpin(const GraphSlot * slot) {
    auto it = std::find(pinned_.begin(), pinned_.end(), slot);
    if (it != pinned_.end()) pinned_.erase(it);
}

GraphSlot & GraphSlots::of(const GraphShape & shape) {
    const size_t n_parts = shape.parts.size();
    if (shape.has_long_part() && !pinned(batch_.get())) {
        if (batch_->n_nodes() < nodes_per_part_ * n_parts) {
            built_by_evicted_ += batch_->n_built();
            batch_ = new_slot(n_parts);
        }
        return *batch_;
    }
    ++uses_;
    const GraphShape shape_class = shape.slot_class();
    for (Few & f : few_) {
        if (f.shape_class == shape_class && !pinned(f.slot.get())) {
            f.last_use = uses_;
            return *f.slot;
        }
    }
    if (few_.size() >= kFewSlots) {
        // the least recently used serves the new class (never the one that ran last: kFewSlots > 1): its scheduler
        // and compute buffers are kept and grown if need be, not freed and made again (batched draft-MTP rounds
        // change class often: the rows of every sequence's step 0 follow what it accepted)
        auto lru = few_.end();
        for (auto it = few_.begin(); it != few_.end(); ++it) {
            if (!pinned(it->slot.get()) && (lru == few_.end() || it->last_use < lru->last_use)) lru = it;
        }
        if (lru != few_.end() && lru->slot->n_nodes() >= nodes_per_part_ * n_parts) {
            lru->slot->clear();
            lru->shape_class = shape_class;
            lru->last_use = uses_;
            return *lru->slot;
        }
        if (lru != few_.end()) {
            built_by_evicted_ += lru->slot->n_built();
            few_.erase(lru);
        }
    }
    few_.push_back({shape_class, uses_, new_slot(n_parts)});
    return *few_.back().slot;
}

std::vector<const GraphSlot *> GraphSlots::all() const {
    std::vector<const GraphSlot *> out = {batch_.get()};
    for (const Few & f : few_) out.push_back(f.slot.get());
    return out;
}

int64_t GraphSlots::n_built() const {
    int64_t n = built_by_evicted_;
    for (const GraphSlot * s : all()) n += s->n_built();
    return n;
}

void GraphSlots::clear() {
    batch_->clear();
    for (Few & f : few_) f.slot->clear();
}

}  // namespace glm5next
