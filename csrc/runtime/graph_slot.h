// A scheduler and the graph it holds allocated, kept for the next ubatch of the same shape (llama.cpp's graph
// reuse: llm_graph_result::can_reuse, then only set_inputs): a decode step, a draft step or a verify pass of the
// shape before runs the graph as it was built and allocated, with only its inputs set (graph/inputs.h).
// Measured before reuse (bundled model q8_0, -t 1, decode): building the graph took ~160 us and allocating it
// ~165 us of a ~1.1 ms step; on the bench preset ~330 + ~275 us of a ~13.5 ms step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "graph/blocks.h"
#include "graph/draft_head.h"
#include "graph/trunk.h"

namespace glm5next {

// Everything one sequence's part of a graph depends on (the rest are inputs): whose caches it reads and writes (the
// graph holds the cache tensors), its rows, its flags, its layout.
struct PartShape {
    uint64_t sequence = 0;  // the sequence's id (Engine::attach): its caches
    int64_t n_rows = 0;
    bool all_logits = false;  // trunk: logits of every row
    bool snapshots = false;   // trunk: per-row KDA snapshots (a verify pass)
    bool shared = false;      // draft: the row attends a reused selection
    bool output = true;       // draft: the last row's logits and z
    GraphLayout layout;
    bool operator==(const PartShape & o) const {
        return sequence == o.sequence && n_rows == o.n_rows && all_logits == o.all_logits && snapshots == o.snapshots &&
               shared == o.shared && output == o.output && layout == o.layout;
    }
};

// Everything a graph's structure depends on: which graph and its parts, in row order.
struct GraphShape {
    enum Kind { kNone, kTrunk, kDraft } kind = kNone;
    std::vector<PartShape> parts;
    bool operator==(const GraphShape & o) const { return kind == o.kind && parts == o.parts; }
    // A part of more than kGatherMaxRows rows (a prompt chunk): the shape changes from ubatch to ubatch.
    bool has_long_part() const;
    // The shape without its parts' layouts and sequences: the class a few-row slot keeps (it rebuilds its graph, in
    // the compute buffers it has, for other positions or other sequences with rows of the same counts and flags).
    GraphShape slot_class() const;
};

// The device buffers of an engine's schedulers (and caches) changed: a count that every slot compares with the one it
// allocated its graph at (GraphSlot::holds). Why: ggml's RPC server forgets the graphs it keeps for recomputing
// whenever any buffer of its is freed, while the client side, which asks for a recompute of the last graph it sent a
// device by that graph's id, does not know (ggml-rpc.cpp, rpc_server::free_buffer; ggml_backend_rpc_graph_compute):
// a graph of one slot run again after another slot's buffers were reallocated asked for a recompute the server could
// not do, and ggml's RPC client ended the process. A graph built again gets new ids, which the server is sent in
// full (allocating the same graph again is no way: ggml's allocator takes tensors that have memory as placed).
struct GraphOpTimes;  // runtime/op_profile.h

struct BufferEpoch {
    uint64_t value = 0;
};

// The devices whose kernels cannot run one of this model's ops although their backends claim it
// (model/kernel_limits.h): a graph's op whose cache lives on such a device runs on the CPU instead.
struct CpuPins {
    std::vector<ggml_backend_dev_t> no_gated_delta_net;  // KDA's recurrence: its head size is not instantiated there
};

class GraphSlot {
public:
    // A scheduler over `backends` (placement order, `cpu` last) for graphs of up to n_nodes nodes; `epoch` (kept by
    // reference) counts the changes of the engine's device buffers; `pins` (kept by reference) the ops a device lacks.
    GraphSlot(std::vector<ggml_backend_t> & backends, ggml_backend_t cpu, size_t n_nodes, BufferEpoch & epoch,
              const CpuPins & pins);
    size_t n_nodes() const { return n_nodes_; }
    ~GraphSlot();
    GraphSlot(const GraphSlot &) = delete;
    GraphSlot & operator=(const GraphSlot &) = delete;

    // The graph of `shape` when the slot holds it (still allocated: nothing else ran here since; with several
    // backends, no device buffer changed since it was allocated: BufferEpoch), else null.
    TrunkGraph * trunk(const GraphShape & shape) { return holds(shape) ? trunk_.get() : nullptr; }
    DraftGraph * draft(const GraphShape & shape) { return holds(shape) ? draft_.get() : nullptr; }

    // What builds a graph into the object and the no_alloc context it is given (the object's gf and inputs). It may
    // run more than once per graph (build); each run must build the same graph.
    template <typename Graph>
    using Builder = std::function<void(Graph & g, ggml_context * ctx)>;

    // Builds the graph of `shape` with `build`, plans and allocates it; the slot then holds it (trunk(), draft()).
    // With `profile`, counts the bytes it copies between devices. Throws std::runtime_error when allocation fails.
    // `build` runs twice: once for a twin that ggml's scheduler plans (ggml_backend_sched_reserve), then for the
    // graph it allocates by that plan. Why: ggml_backend_sched_alloc_graph reuses the plan of the last graph planned
    // when the new one has as many nodes and leafs and each node fits its old place (ggml-alloc.c,
    // ggml_gallocr_needs_realloc), which says nothing of which tensors live at once nor of the leafs' places: a graph
    // of another shape took places planned for other tensors (tests/csrc/test_graph_slot.py: 2x overwritten while
    // still needed; with the KDA states read as views of the cells, a 4-slot server crashed in
    // ggml_gallocr_alloc_graph, stop 42). The twin, not the graph itself: planning splits a graph for its backends
    // and points its nodes at the split's copies of inputs from other devices (ggml_backend_sched_split_graph), which
    // the next split frees, so a graph split twice reads freed copies (an RPC device got an index input never set).
    // Costs a second build (~0.16 ms on the bundled model) once per shape: graphs are kept (GraphSlots).
    template <typename Graph>
    Graph & build(const GraphShape & shape, const Builder<Graph> & build, bool profile);
    // Sizes the compute buffers for the graph `build` makes, then drops it. Throws std::runtime_error when a device
    // cannot hold them, saying `what`.
    template <typename Graph>
    void reserve(const Builder<Graph> & build, const std::string & what);
    // Runs the graph the slot holds (after its inputs were set); with `profile` times the copies between devices,
    // with `ops` each node, into it (runtime/op_profile.h; not both: Engine refuses).
    void compute(bool profile, GraphOpTimes * ops = nullptr);

    // Forget the graph (the next ubatch builds and allocates one).
    void clear();

    ggml_backend_sched_t sched() const { return sched_; }
    int64_t n_built() const { return n_built_; }  // graphs allocated here
    size_t bytes_copied() const { return bytes_copied_; }  // by the graph held, when allocated with profile
    double copy_seconds() const { return copy_seconds_; }  // in its last run, when profiled; else -1

private:
    ggml_context * begin();
    template <typename Graph>
    std::unique_ptr<Graph> & held();  // trunk_ or draft_
    void pin_cpu_ops(ggml_cgraph * gf);
    // The sizes of the scheduler's compute buffers, one per backend.
    std::vector<size_t> buffer_sizes() const;
    // call() (a scheduler call that may reallocate the compute buffers; returns whether it succeeded), counting in
    // the epoch a change of their sizes. Returns what call returned.
    template <typename Call>
    bool resizing(Call call);
    // Plans gf (ggml_backend_sched_reserve, after a reset); false when a device cannot hold its buffers.
    bool plan(ggml_cgraph * gf);
    bool holds(const GraphShape & shape) const {
        return shape_ == shape && (!several_ || allocated_at_ == epoch_.value);
    }

    BufferEpoch & epoch_;
    const CpuPins & pins_;
    uint64_t allocated_at_ = 0;  // the epoch the graph held was allocated at
    std::vector<ggml_backend_t> & backends_;
    ggml_backend_sched_t sched_ = nullptr;
    ggml_backend_t cpu_;
    size_t n_nodes_;
    bool several_ = false;  // more than one backend
    // the graph context's memory (tensor and graph metadata only), sized for the largest graph and left
    // uninitialized: only the pages a graph's metadata uses become resident (~5.5 MB a slot on the bundled model
    // when zeroed, for graphs that use a fifth of it)
    size_t meta_size_ = 0;
    std::unique_ptr<uint8_t[]> meta_;
    ggml_context * ctx_ = nullptr;
    ggml_cgraph * gf_ = nullptr;
    GraphShape shape_;
    std::unique_ptr<TrunkGraph> trunk_;
    std::unique_ptr<DraftGraph> draft_;
    int64_t n_built_ = 0;
    size_t bytes_copied_ = 0;
    double copy_seconds_ = -1.0;
};

// The engine's schedulers, each keeping its last graph: one for ubatches with a part of more than kGatherMaxRows rows
// (prompts, the draft head's rows of a prompt) and one per few-row shape class (trunk or draft head, its parts' row
// counts and flags: logits of every row, KDA snapshots, a reused selection), made on first use, so that the shapes
// draft-MTP rounds alternate between (a step without drafts, verify passes and draft steps 0 of each length the
// rounds have, the later draft steps; of one sequence or of several) each run on the graph of the round before. Measured with one slot per role, whatever the rows
// (bundled model q8_0, -t 1): a round of draft-MTP rebuilt a graph in 28 rounds of 53 at n_max 3, whose step 0
// writes 1..4 rows as the last round accepted, and a build and allocation costs ~0.3 ms, half a decode step; on the
// 4-layer "predictable" preset, 31 builds in 40 rounds made drafting slower than plain decoding at -t 1 even with 3
// drafts in 4 accepted. Now: none in steady state.
class GraphSlots {
public:
    // Few-row slots kept at most: the least recently used one goes when another is needed (n_max 3 uses ~9).
    static constexpr size_t kFewSlots = 12;

    // Schedulers over `backends` (placement order, `cpu` last; kept by reference) for graphs of up to
    // nodes_per_part nodes per sequence.
    GraphSlots(std::vector<ggml_backend_t> & backends, ggml_backend_t cpu, size_t nodes_per_part, const CpuPins & pins);

    // The slot of graphs of `shape`'s class (holding that graph if the last graph of the class had this shape), with
    // room for its nodes. A slot whose graph awaits a verify pass's commit (pin) is never given out.
    GraphSlot & of(const GraphShape & shape);
    // `slot` holds KDA snapshots a sequence's commit still reads: of() passes it by (and evicts it not) until unpin.
    void pin(const GraphSlot * slot);
    void unpin(const GraphSlot * slot);
    // The slots there are: the batch slot first.
    std::vector<const GraphSlot *> all() const;
    int64_t n_built() const;  // graphs allocated in any slot, evicted ones included
    void clear();             // every slot forgets its graph
    // Device buffers outside the slots changed (a sequence's caches freed): every slot's graph is allocated again
    // before it runs (BufferEpoch).
    void buffers_changed() { ++epoch_.value; }

private:
    struct Few {
        GraphShape shape_class;  // GraphShape::slot_class
        uint64_t last_use;
        std::unique_ptr<GraphSlot> slot;
    };
    bool pinned(const GraphSlot * slot) const;
    std::unique_ptr<GraphSlot> new_slot(size_t n_parts);

    std::vector<ggml_backend_t> & backends_;
    ggml_backend_t cpu_;
    size_t nodes_per_part_;
    const CpuPins & pins_;
    BufferEpoch epoch_;  // before the slots: they keep a reference to it
    std::vector<const GraphSlot *> pinned_;
    std::unique_ptr<GraphSlot> batch_;  // replaced by a larger one for a graph of more parts than it holds
    std::vector<Few> few_;
    uint64_t uses_ = 0;
    int64_t built_by_evicted_ = 0;
};

}  // namespace glm5next
