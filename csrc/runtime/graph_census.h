// What a graph is made of once the scheduler has placed it, for the GPU work of docs/runtime.md (Placement: a step
// on a GPU): its compute nodes and the device each runs on, its splits, row groups and parts, its products, the
// nodes that would turn ggml-cuda's CUDA graphs off, and the synchronous reads of device memory a run of it makes.
// Counted on any machine: a loopback RPC device declared CUDA (GLM5NEXT_RPC_BACKEND=CUDA) is counted as the GPU it
// stands for. glm5next-bench -npl --census prints it per graph kind (runtime/op_profile.h, graph_kind).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ggml-backend.h"
#include "ggml.h"

namespace glm5next {

struct GraphCensus {
    int64_t nodes = 0;                         // compute nodes: views, reshapes, permutes and transposes are none
    std::map<std::string, int64_t> by_device;  // compute nodes by the device the scheduler runs them on
    int n_splits = 0;                          // the scheduler's splits (one per change of device)
    int64_t row_groups = 0;                    // graph/parts.h: the blocks without caches run once per group
    int64_t parts = 0;                         // sequences' parts
    int64_t products = 0;                      // MUL_MAT, MUL_MAT_ID and this project's rows kernels
    int64_t one_matrix_id = 0;                 // MUL_MAT_ID over one matrix (BlockBuilder::mm's row-by-row route)
    // MUL_MAT_ID nodes on a CUDA device (or one declared so) that take ggml-cuda's synchronizing fallback at the
    // compute capability asked for: each turns CUDA graphs off for its split (model/kernel_limits.h)
    int64_t cuda_graph_blockers = 0;
    int64_t readbacks = 0;                     // reads of a device's memory in a run: each one waits for the device
};

// The census of `gf` as `sched` has allocated it (after ggml_backend_sched_alloc_graph, until the scheduler is
// reset), with CUDA-graph blockers counted for compute capability `cuda_cc`; row_groups, parts and readbacks are
// the caller's to fill.
GraphCensus take_census(ggml_backend_sched_t sched, ggml_cgraph * gf, int cuda_cc);

// Whether reading `t` (a graph output) waits for a device: its data is not in host memory.
bool reads_device_memory(const ggml_tensor * t);

}  // namespace glm5next
