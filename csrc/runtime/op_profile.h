// Where a graph's time goes, op by op, for glm5next-bench --op-profile (issue 28: the profile of a draft-MTP round;
// issue 24: of a step over several sequences). The scheduler's eval callback asks for every node, so each node runs
// as a graph of its own and is timed alone: the sum is higher than an untimed run's duration (a thread-pool start
// and a sync per node), the shares are what to read.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "ggml-backend.h"
#include "runtime/graph_slot.h"

namespace glm5next {

struct OpTime {
    double ms = 0.0;    // summed over runs
    int64_t nodes = 0;  // summed over runs
};

// One kind of graph's op times, summed over the runs timed.
struct GraphOpTimes {
    int64_t runs = 0;
    std::map<std::string, OpTime> ops;  // by op_key
};

// Every graph kind timed, by graph_kind.
using OpProfile = std::map<std::string, GraphOpTimes>;

// What a graph of `shape` does, as the profile names it: "decode" (one row per sequence: plain decoding, or a
// draft-MTP round without drafts), "verify" (a token and its drafts), "prefill" (prompt rows), "prefill + verify"
// (one sequence's prompt rows with another's verify rows), "draft step" (a draft-head graph whose last row drafts)
// or "draft rows" (one that only writes the draft layer's rows), with its rows
// ("2 rows"), over several sequences their count ("x 4 sequences"), and ", reused selection" for draft steps that
// attend the selection of step 0 (index sharing: no indexer in that graph).
std::string graph_kind(const GraphShape & shape);

// The op of a node as the profile counts it: ggml's op name ("ADD", "GATED_DELTA_NET"; a custom op as "CUSTOM"),
// with the weight's type for a product ("MUL_MAT q8_0", "MUL_MAT_ID q8_0": the routed experts, or the products of a
// matrix per head), and " row by row" for one matrix multiplied through MUL_MAT_ID (a few-row group's rows each
// alone: BlockBuilder::mm, batch invariance), "CUSTOM q8_0 rows" for this project's few-row q8_0 kernel
// (graph/q8_0_rows_ops.h), "CUSTOM q8_0 rows, experts" for the same kernel's routed experts, and "CUSTOM f16 rows" /
// "CUSTOM f32 rows" for the f16 and f32 one (graph/float_rows_ops.h).
std::string op_key(const ggml_tensor * node);

// Times each node of one graph computation through `sched` into `into` (one run more). Installs the scheduler's
// eval callback for its lifetime (not with a CopyTimer at once: the scheduler has one callback).
class OpTimer {
public:
    OpTimer(ggml_backend_sched_t sched, GraphOpTimes & into);
    ~OpTimer();
    OpTimer(const OpTimer &) = delete;
    OpTimer & operator=(const OpTimer &) = delete;

private:
    static bool on_eval(ggml_tensor * t, bool ask, void * self);
    using Clock = std::chrono::steady_clock;
    ggml_backend_sched_t sched_;
    GraphOpTimes & into_;
    Clock::time_point start_;
};

}  // namespace glm5next
