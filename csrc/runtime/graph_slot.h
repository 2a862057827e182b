// The graph the engine's scheduler holds allocated, kept for the next ubatch of the same shape (llama.cpp's graph
// reuse: llm_graph_result::can_reuse, then only set_inputs): a decode step, a draft step or a verify pass of the
// shape before runs the graph as it was built and allocated, with only its inputs set (graph/inputs.h).
// Measured before reuse (bundled model q8_0, -t 1, decode): building the graph took ~160 us and allocating it
// ~165 us of a ~1.1 ms step; on the bench preset ~330 + ~275 us of a ~13.5 ms step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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
    // meta_bytes: the metadata memory of one graph (tensors and graph, no data).
    explicit GraphSlot(size_t meta_bytes) : meta_(meta_bytes) {}
    ~GraphSlot() { clear(); }
    GraphSlot(const GraphSlot &) = delete;
    GraphSlot & operator=(const GraphSlot &) = delete;

    // The graph of `shape` when the slot holds it (allocated by the scheduler since nothing else was), else null.
    TrunkGraph * trunk(const GraphShape & shape) { return shape_ == shape ? trunk_.get() : nullptr; }
    DraftGraph * draft(const GraphShape & shape) { return shape_ == shape ? draft_.get() : nullptr; }

    // Drops what the slot holds and returns an empty graph with the context to build it in; once the caller has
    // built and allocated it (before anything else uses the scheduler), hold(shape) makes it the graph of `shape`.
    TrunkGraph & new_trunk(ggml_context ** ctx);
    DraftGraph & new_draft(ggml_context ** ctx);
    void hold(const GraphShape & shape) { shape_ = shape; }

    // Forget the graph: call before the scheduler allocates or reserves anything else.
    void clear();

    // The metadata memory, for a graph built outside the slot (which clears it first).
    std::vector<uint8_t> & meta() { return meta_; }

private:
    ggml_context * begin();

    std::vector<uint8_t> meta_;
    ggml_context * ctx_ = nullptr;
    GraphShape shape_;
    std::unique_ptr<TrunkGraph> trunk_;
    std::unique_ptr<DraftGraph> draft_;
};

}  // namespace glm5next
