// What every sequence on one loaded model shares (docs/runtime.md, Engine; issue 24: one engine, many sequences): the
// weights (and the requantized draft layer), the devices and their scheduler, the graphs kept for reuse, and one CPU
// thread pool. It runs the graphs: one ubatch of the trunk or the draft head over the rows of one or more sequences
// (runtime/sequence.h), with shared matmuls and per-sequence attention, indexer and KDA (graph/parts.h), where a
// row's results do not depend on the rows it shares the graph with.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "model/draft_weights.h"
#include "model/kernel_limits.h"
#include "model/model.h"
#include "runtime/cache_cells.h"
#include "runtime/graph_census.h"
#include "runtime/graph_slot.h"
#include "runtime/op_profile.h"
#include "runtime/outputs.h"
#include "runtime/sequence.h"
#include "runtime/traffic.h"

namespace glm5next {

struct EngineParams {
    uint32_t n_batch = 512;  // rows per ubatch of one sequence
    int n_threads = 0;       // 0 = hardware concurrency
    ggml_type draft_type = GGML_TYPE_COUNT;  // the draft layer as stored, or requantized (q8_0 / q4_0)
    // The rows of the verify passes and draft steps the compute buffers are sized for at load (draft n_max + 1);
    // longer ones grow them on first use. (A verify pass keeps every row's KDA state: 16 rows took 76 MiB on the
    // bench preset, more than a 512-row prompt ubatch's 58 MiB.)
    uint32_t n_verify_rows = 4;
    // Sequences whose caches (the trunk's and the NextN layer's) are cells of the engine's (runtime/cache_cells.h;
    // llama.cpp's n_seq_max, the server's -np): the rows of those sequences in one step write their caches and run
    // KDA's conv and gated delta rule per layer at once. More sequences may be made; they keep caches of their own
    // and run per sequence.
    uint32_t n_seq_max = 1;
};

// Memory one device holds for this engine (bytes), as llama.cpp's load report gives it.
struct DeviceMemory {
    std::string device;
    size_t weights = 0;  // the model's (and draft file's) weights on it
    size_t caches = 0;   // the caches of every sequence on the engine (trunk and NextN layer), and free cache cells
    size_t compute = 0;  // the scheduler's compute buffer (sized at load for a full ubatch at the end of the context)
};

// One sequence's rows in a trunk ubatch (Engine::run_trunk).
struct TrunkPart {
    Sequence * seq = nullptr;
    const int32_t * tokens = nullptr;
    int64_t n = 0;            // 1..n_batch rows at the sequence's end
    bool all_logits = false;  // logits of every row (else of the last)
    bool verify = false;      // provisional rows with per-row KDA snapshots: Sequence::commit(n_keep) follows
    // Receives the rows' hidden states at rows out_row0.. of out->hidden, their selections likewise (with
    // `selections`), and the logits (every row's at out_row0.., or the last row's when out_row0 + n == out->n_tokens);
    // sized by the caller.
    EvalOutput * out = nullptr;
    int64_t out_row0 = 0;
    // Read each DSA layer's selection back (Sequence::eval's inspection, Model.selected_positions): a generation does
    // not read them, and on a device each is one more read that waits for it (runtime/graph_census.h, readbacks).
    bool selections = true;
};

// One sequence's rows in a draft-head ubatch (Engine::run_draft): (hidden[i], tokens[i]) at positions pos0..
struct DraftPart {
    Sequence * seq = nullptr;
    const float * hidden = nullptr;   // [n, n_embd] row-major
    const int32_t * tokens = nullptr;
    int64_t n = 0;                    // 1..n_batch rows
    int64_t pos0 = 0;                 // at most the rows written (the rows after it are dropped)
    const int32_t * saved_pools = nullptr;  // n == 1: attend exactly the selection row saved_p0 made
    int64_t saved_p0 = -1;
    bool from_trunk = false;          // hidden are trunk post-norm states (else a draft step's z)
    DraftOutput * out = nullptr;      // the last row's answer; null: the rows are only written
};

class Engine {
public:
    // `draft_model`: a separate file holding the NextN layer (--mtp-only), or null to use `model`'s own. Throws
    // std::invalid_argument when it does not fit `model` (sizes, layer count) or has no NextN layer.
    Engine(const Model & model, const EngineParams & params, const Model * draft_model = nullptr);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    // One trunk ubatch over `parts` (each sequence at most once, none with a verify pass awaiting commit): parts
    // of at most kGatherMaxRows rows share the few-row group, longer ones get a group each (graph/parts.h).
    // Afterwards each sequence has its rows appended (or pending, with `verify`) and each part's `out` its outputs.
    // Throws std::invalid_argument for a part out of its ubatch or context, a token id out of range or a sequence
    // twice, std::logic_error for a pending verify pass; nothing runs then.
    void run_trunk(const std::vector<TrunkPart> & parts);
    // One draft-head ubatch over `parts`, likewise. Throws std::invalid_argument without a NextN layer, for rows
    // that leave a gap or exceed n_ctx or a ubatch, a reused selection not one row after the row that made it.
    void run_draft(const std::vector<DraftPart> & parts);

    // Sizes the compute buffers for the largest graphs a sequence of `seq`'s n_ctx runs (once, for the largest
    // n_ctx asked), as llama.cpp does at load, so that memory() reports them and a device too small fails here
    // rather than on the first request. Sequence's constructor calls it.
    void reserve(const Sequence & seq);

    uint32_t n_vocab() const { return model_.hp.n_vocab; }
    uint32_t n_embd() const { return model_.hp.n_embd; }
    const EngineParams & params() const { return params_; }
    const Model & model() const { return model_; }
    const Model & draft_model() const { return draft_model_; }  // the file the draft head's weights come from
    bool has_draft_head() const { return draft_weights_ != nullptr; }
    // Whether a trunk step of several sequences is one pass over all their rows (graph/trunk.h, trunk_in_one_pass:
    // the trunk multiplies on a GPU backend); Batch then bounds a step's rows by n_batch.
    bool one_pass() const { return one_pass_; }
    bool index_share_mtp() const { return model_.hp.index_share_mtp; }
    int64_t n_top_pool() const { return model_.hp.idx_top_k / model_.hp.idx_kpool; }
    // Throws std::invalid_argument naming the first token id outside the vocabulary.
    void check_tokens(const int32_t * tokens, int64_t n) const;

    // Graph splits of the last graph run (1 when every op ran on one device).
    int n_splits() const;
    // Graphs built and allocated since load (the ones at load not counted): a ubatch of the shape of the graph
    // before runs that graph again (runtime/graph_slot.h).
    int64_t n_graphs_built() const;
    // What crossed devices in the last graph: its splits and, if it ran while profile_traffic was on, the bytes
    // copied and the copy time (else 0 and -1).
    GraphTraffic traffic() const;
    // Measures the traffic of every graph run from now on (runtime/traffic.h: each device syncs after every node,
    // so compute is slower while on). For glm5next-bench, not for serving.
    void profile_traffic(bool on);
    // Times every node of every graph run from now on, by graph kind and op (runtime/op_profile.h: each node runs
    // alone, so compute is slower while on). off: stops and forgets. Throws std::invalid_argument to turn it on
    // while profile_traffic is on, and profile_traffic throws while this is (the scheduler has one eval callback).
    // For glm5next-bench --op-profile, not for serving.
    void profile_ops(bool on);
    // What profile_ops timed since it was turned on (empty when off).
    OpProfile op_profile() const;
    // Takes the census of every graph run from now on (runtime/graph_census.h), its CUDA-graph blockers counted for
    // compute capability cuda_cc; off: stops and forgets. Cheap (one pass over the nodes per run), not free: for
    // glm5next-bench --census and tests, not for serving.
    void census_graphs(bool on, int cuda_cc = kCudaCcHopper);
    // The census of the last graph run of each kind (graph_kind, runtime/op_profile.h) since census_graphs was
    // turned on (empty when off).
    std::map<std::string, GraphCensus> graph_census() const;
    // Per device that holds weights, caches or compute buffers: the bytes of each (CPU last).
    std::vector<DeviceMemory> memory() const;
    const DraftWeights * draft_weights() const { return draft_weights_.get(); }  // null without a draft head
    // The ops that run on the CPU although their layer is placed on a device, because that device's kernel cannot
    // take this model's shapes (model/kernel_limits.h), one line each for the load report; empty when none.
    const std::vector<std::string> & cpu_pinned_ops() const { return cpu_pinned_ops_; }

    // What sequences do on the engine: one at a time (a graph run, a cache read or write; ggml's device
    // connections take one caller), from any thread. Recursive: a sequence's evaluation runs graphs.
    std::recursive_mutex & mutex() const { return mutex_; }
    // The sequences on the engine (Sequence's constructor and destructor), for memory(). attach returns the
    // sequence's id: unique for the engine's life (graphs kept for reuse are keyed by it, never by an address a
    // later sequence may get again).
    uint64_t attach(const Sequence * seq);
    void detach(const Sequence * seq);
    // The cells a new sequence's trunk caches take while one fits, and its NextN layer's (null without a draft
    // head) (Sequence's constructor).
    CacheCells & cache_cells() { return *cache_cells_; }
    CacheCells * draft_cache_cells() { return draft_cache_cells_.get(); }
    // A sequence committed the verify pass whose KDA snapshots `slot` holds (Sequence::commit): the slot may run
    // other graphs again.
    void release_snapshots(const GraphSlot * slot);

private:
    // Where a graph of `shape` adds its op times while profile_ops is on (else null).
    GraphOpTimes * op_times(const GraphShape & shape);
    // While census_graphs is on: the census of the graph `slot` ran last (of `shape`, its parts in groups), with
    // the readbacks its outputs took.
    void count(const GraphSlot & slot, ggml_cgraph * gf, const GraphShape & shape, const GraphParts & parts,
               int64_t readbacks);
    // Fills pins_ and cpu_pinned_ops_ for the devices the scheduler runs on (model/kernel_limits.h).
    void pin_unsupported_kernels(const std::vector<ggml_backend_dev_t> & devices);

    const Model & model_;
    const Model & draft_model_;  // the file the draft head's weights come from (model_ unless -md)
    EngineParams params_;
    std::unique_ptr<DraftWeights> draft_weights_;
    std::unique_ptr<CacheCells> cache_cells_, draft_cache_cells_;
    std::vector<ggml_backend_t> backends_;  // the placed devices', then the CPU's
    ggml_backend_t cpu_ = nullptr;
    CpuPins pins_;  // before graphs_: its slots keep a reference
    std::vector<std::string> cpu_pinned_ops_;
    // Schedulers per shape class, each keeping its last graph for the next ubatch of its shape
    // (runtime/graph_slot.h).
    std::unique_ptr<GraphSlots> graphs_;
    GraphSlot * last_ = nullptr;  // the one that ran last
    bool profile_traffic_ = false;
    std::optional<OpProfile> op_profile_;  // while profile_ops is on
    std::optional<std::map<std::string, GraphCensus>> census_;  // while census_graphs is on
    int census_cuda_cc_ = kCudaCcHopper;
    uint32_t reserved_n_ctx_ = 0;  // the n_ctx reserve sized the compute buffers for
    bool one_pass_ = false;
    std::vector<const Sequence *> sequences_;
    uint64_t next_sequence_id_ = 1;
    mutable std::recursive_mutex mutex_;
};

}  // namespace glm5next
