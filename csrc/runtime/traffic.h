// What crosses devices when the scheduler runs a graph over several (docs/runtime.md, placement): the bytes of the
// tensors it copies between devices, and the time those copies take, for the load report and glm5next-bench.
#pragma once

#include <chrono>
#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "ggml-backend.h"

namespace glm5next {

struct GraphTraffic {
    int n_splits = 1;
    size_t bytes_copied = 0;     // per graph run (see bytes_copied)
    double copy_seconds = -1.0;  // time spent copying in the last timed run; -1 when it was not timed
};

// Each node of a graph with the tensors it reads. Taken before ggml_backend_sched_alloc_graph, which rewires a
// node that reads a tensor of another device to the scheduler's copy of it.
using GraphSources = std::vector<std::pair<ggml_tensor *, std::array<ggml_tensor *, GGML_MAX_SRC>>>;
GraphSources graph_sources(ggml_cgraph * gf);

// Bytes ggml_backend_sched copies to run the graph `sources` was taken from, once it has been split and allocated:
// every tensor read by a node on another device than its own, once per reading device (the scheduler keeps one
// copy per device).
size_t bytes_copied(ggml_backend_sched_t sched, const GraphSources & sources);

// Returns once node t, handed to the scheduler's eval callback as computed, is: a device whose synchronize returns
// before it is done (ggml's RPC client) is done once a read of t returns, so this reads one byte of it.
void wait_until_computed(const ggml_tensor * t);

// Times the copies of one graph computation through the scheduler's eval callback: ggml copies a split's inputs
// before computing its first node, so the time from one device's last node to the next device's first node (and
// from start() to the first node: the graph inputs) is copy time. The callback asks for every node and reads a
// byte of each (ggml's RPC client returns from synchronize before the server is done; a read waits), so compute
// is slower while timed, the copies are not: compare copy_seconds with an untimed run's duration.
class CopyTimer {
public:
    explicit CopyTimer(ggml_backend_sched_t sched);  // installs the callback and starts the clock
    ~CopyTimer();                                    // removes the callback
    CopyTimer(const CopyTimer &) = delete;
    CopyTimer & operator=(const CopyTimer &) = delete;
    double seconds() const { return copy_seconds_; }

private:
    static bool on_eval(ggml_tensor * t, bool ask, void * self);
    using Clock = std::chrono::steady_clock;
    ggml_backend_sched_t sched_;
    ggml_backend_t current_ = nullptr;
    Clock::time_point last_;
    double copy_seconds_ = 0.0;
};

}  // namespace glm5next
