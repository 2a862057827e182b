// A scheduler and the graph it holds allocated, kept for the next ubatch of the same shape (llama.cpp's graph
// reuse: llm_graph_result::can_reuse, then only set_inputs): a decode step, a draft step or a verify pass of the
// shape before runs the graph as it was built and allocated, with only its inputs set (graph/inputs.h).
// Measured before reuse (bundled model q8_0, -t 1, decode): building the graph took ~160 us and allocating it
// ~165 us of a ~1.1 ms step; on the bench preset ~330 + ~275 us of a ~13.5 ms step.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "graph/blocks.h"
#include "graph/draft_head.h"
#include "graph/trunk.h"

namespace glm5next {

// Everything a graph's structure depends on (the rest are inputs): which graph, its rows, its flags, its layout.
struct GraphShape {
    enum Kind { kNone, kTrunk, kDraft } kind = kNone;
    int64_t n_rows = 0;
    bool all_logits = false;  // trunk: logits of every row
    bool snapshots = false;   // trunk: per-row KDA snapshots (a verify pass)
    bool shared = false;      // draft: the row attends a reused selection
    GraphLayout layout;
    bool operator==(const GraphShape & o) const {
        return kind == o.kind && n_rows == o.n_rows && all_logits == o.all_logits && snapshots == o.snapshots &&
               shared == o.shared && layout == o.layout;
    }
};

class GraphSlot {
public:
    // A scheduler over `backends` (placement order, `cpu` last) for graphs of up to n_nodes nodes.
    GraphSlot(std::vector<ggml_backend_t> & backends, ggml_backend_t cpu, size_t n_nodes);
    ~GraphSlot();
    GraphSlot(const GraphSlot &) = delete;
    GraphSlot & operator=(const GraphSlot &) = delete;

    // The graph of `shape` when the slot holds it (still allocated: nothing else ran here since), else null.
    TrunkGraph * trunk(const GraphShape & shape) { return shape_ == shape ? trunk_.get() : nullptr; }
    DraftGraph * draft(const GraphShape & shape) { return shape_ == shape ? draft_.get() : nullptr; }

    // Drops what the slot holds and returns an empty graph with the context to build it in, for alloc or reserve.
    TrunkGraph & new_trunk(ggml_context ** ctx);
    DraftGraph & new_draft(ggml_context ** ctx);

    // Sizes the compute buffers for gf (a graph just built here), then drops it. Throws std::runtime_error when a
    // device cannot hold them, saying `what`.
    void reserve(ggml_cgraph * gf, const std::string & what);
    // Allocates gf (a graph just built here), which the slot then holds as the graph of `shape`; with `profile`
    // counts the bytes it copies between devices. Throws std::runtime_error when allocation fails.
    void alloc(ggml_cgraph * gf, const GraphShape & shape, bool profile);
    // Runs the graph the slot holds (after its inputs were set); with `profile` times the copies between devices.
    void compute(bool profile);

    // Forget the graph (the next ubatch builds and allocates one).
    void clear();

    ggml_backend_sched_t sched() const { return sched_; }
    int64_t n_built() const { return n_built_; }  // graphs allocated here
    size_t bytes_copied() const { return bytes_copied_; }  // by the graph held, when allocated with profile
    double copy_seconds() const { return copy_seconds_; }  // in its last run, when profiled; else -1

private:
    ggml_context * begin();
    void pin_custom_ops(ggml_cgraph * gf);

    ggml_backend_sched_t sched_ = nullptr;
    ggml_backend_t cpu_;
    bool several_ = false;  // more than one backend
    std::vector<uint8_t> meta_;  // the graph context's memory (tensor and graph metadata only)
    ggml_context * ctx_ = nullptr;
    ggml_cgraph * gf_ = nullptr;
    GraphShape shape_;
    std::unique_ptr<TrunkGraph> trunk_;
    std::unique_ptr<DraftGraph> draft_;
    int64_t n_built_ = 0;
    size_t bytes_copied_ = 0;
    double copy_seconds_ = -1.0;
};

// The engine's schedulers, one per role, each keeping its last graph: the shapes a draft-MTP round alternates
// between (a step without drafts, a verify pass, the draft head's first and later steps) each run on the graph of
// the round before instead of evicting one another. Measured with one trunk and one draft scheduler (bundled
// model q8_0, -t 1, held-out code, adaptive lengths): ~22 graphs built per 128-token reply, not 3 as without
// drafting, and a round without drafts took 0.68 ms against 0.61 for plain decoding.
class GraphSlots {
public:
    enum Role {
        kBatch,        // more than kGatherMaxRows rows: prompt ubatches, the draft head's rows of a prompt
        kTrunkRow,     // one trunk row: a decode step, a verify pass without drafts
        kTrunkFew,     // 2..kGatherMaxRows trunk rows: a verify pass with drafts
        kDraftShared,  // a draft step that reuses the first step's selection (index sharing)
        kDraftFew,     // the draft head's other steps: the first of a round, with the rows written before it
        kRoles
    };
    static Role role(const GraphShape & shape);

    // Schedulers for every role (the draft roles only with `draft_head`) over `backends` (placement order, `cpu`
    // last) for graphs of up to n_nodes nodes.
    GraphSlots(std::vector<ggml_backend_t> & backends, ggml_backend_t cpu, size_t n_nodes, bool draft_head);

    // The slot of `shape`'s role (it holds that graph if the last graph of the role had this shape).
    GraphSlot & of(const GraphShape & shape) { return at(role(shape)); }
    // The slot of a role; std::logic_error for a draft role without a draft head.
    GraphSlot & at(Role r);
    // The slots there are, in role order.
    std::vector<const GraphSlot *> all() const;
    int64_t n_built() const;  // graphs allocated in any slot
    void clear();             // every slot forgets its graph

private:
    std::array<std::unique_ptr<GraphSlot>, kRoles> slots_;
};

}  // namespace glm5next
