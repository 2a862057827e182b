// Runs the trunk and the NextN draft head over one sequence (runtime.md, Engine): prefill in ubatches of n_batch
// rows, decode, and the verify pass of a draft-MTP round, whose rows stay provisional until commit(n_keep).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "model/draft_weights.h"
#include "model/model.h"
#include "runtime/checkpoints.h"
#include "runtime/graph_slot.h"
#include "runtime/seq_cache.h"
#include "runtime/sequence_state.h"
#include "runtime/traffic.h"

namespace glm5next {

struct EngineParams {
    uint32_t n_ctx = 4096;
    uint32_t n_batch = 512;  // rows per ubatch
    int n_threads = 0;       // 0 = hardware concurrency
    ggml_type draft_type = GGML_TYPE_COUNT;  // the draft layer as stored, or requantized (q8_0 / q4_0)
    uint32_t n_checkpoints = 32;      // context checkpoints kept (llama-server's --ctx-checkpoints); 0 = none
    uint32_t checkpoint_every = 8192; // while prefilling, a checkpoint at every multiple of this row (llama.cpp's 8192)
    // The rows of the verify passes and draft steps the compute buffers are sized for at load (draft n_max + 1);
    // longer ones grow them on first use. (A verify pass keeps every row's KDA state: 16 rows took 76 MiB on the
    // bench preset, more than a 512-row prompt ubatch's 58 MiB.)
    uint32_t n_verify_rows = 4;
};

// Memory one device holds for this engine (bytes), as llama.cpp's load report gives it.
struct DeviceMemory {
    std::string device;
    size_t weights = 0;  // the model's (and draft file's) weights on it
    size_t caches = 0;   // the sequence caches (trunk and NextN layer)
    size_t compute = 0;  // the scheduler's compute buffer (sized at load for a full ubatch at the end of the context)
};

struct EvalOutput {
    int64_t n_tokens = 0;
    int64_t n_logit_rows = 0;          // n_tokens with logits_all, else 1
    std::vector<float> logits;         // [n_logit_rows, n_vocab] row-major
    std::vector<float> hidden;         // [n_tokens, n_embd] post-norm hidden state
    std::vector<int> dsa_layers;       // trunk DSA layers, in order
    // per DSA layer: [n_tokens, n_top_pool] chosen pools (-1 = none), best first
    std::vector<std::vector<int32_t>> pools;
};

// The draft head's answer for the last of the rows it was given.
struct DraftOutput {
    std::vector<float> logits;   // [n_vocab]
    std::vector<float> z;        // [n_embd] post-shared-norm output (the next step's hidden input)
    std::vector<int32_t> pools;  // [n_top_pool] chosen pools (-1 = none); the saved ones when the step reused them
};

class Engine {
public:
    // `draft_model`: a separate file holding the NextN layer (--mtp-only), or null to use `model`'s own. Throws
    // std::invalid_argument when it does not fit `model` (sizes, layer count) or has no NextN layer.
    Engine(const Model & model, const EngineParams & params, const Model * draft_model = nullptr);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    // Appends `tokens` to the sequence and returns logits (all rows or the last), hidden states and selections.
    // Throws std::invalid_argument for an empty input, a token id out of range or a context overflow, and
    // std::logic_error while a verify pass awaits its commit.
    EvalOutput eval(const std::vector<int32_t> & tokens, bool logits_all);

    // The verify pass of a draft-MTP round (runtime.md, draft-MTP round, step 2): evaluates `tokens` (one
    // ubatch) as provisional rows with per-row KDA snapshots and writes the logits and hidden states of every row
    // into `out`, whose buffers a caller reuses round after round (no [n, n_vocab] allocation per round). The
    // caller decides how many rows to keep and calls commit(n_keep) before anything else runs on the engine.
    // Throws std::invalid_argument for rows that do not fit one ubatch or the context, or a bad token id.
    void verify(const std::vector<int32_t> & tokens, EvalOutput & out);

    // Keeps the first n_keep rows of the pending verify pass (1 <= n_keep <= its rows) and rolls the sequence
    // cache back past them (SeqCache::commit): no replay. Throws std::logic_error without a pending pass.
    void commit(int64_t n_keep);

    // Keeps a checkpoint of the sequence as it is now (n_past >= 1; no verify pass pending): what a later request
    // sharing this prefix resumes from. Made at the end of every prompt, and by eval every checkpoint_every rows.
    // `logits`: the last row's [n_vocab], kept with it (a prompt's end), or empty.
    void checkpoint(std::vector<float> logits = {});

    // Prepares the sequence for `prompt`: keeps the longest prefix it can resume from and returns its length c
    // (0: the sequence was reset), so that prompt[c:] is what is left to evaluate. The rows kept are those of
    // prompt[:c] exactly: c is at most the common prefix of the sequence's tokens and the prompt, and it is the
    // current length or a checkpoint's (the KDA states cannot drop rows). c < prompt.size() (the last token is
    // evaluated again, for its logits) unless a checkpoint at the prompt's end kept its logits: then c is the
    // whole prompt and `logits` receives them [n_vocab] (else it is emptied). With `draft_rows`, the NextN
    // layer's rows before c-1 must also have been written from the trunk (draft_rows from_trunk), so that
    // drafting after a hit is drafting without one. `hidden` receives row c-1's post-norm hidden state [n_embd]
    // (the draft head's row c-1 needs it).
    int64_t resume(const std::vector<int32_t> & prompt, bool draft_rows, std::vector<float> & hidden,
                   std::vector<float> & logits);
    // The most of `prompt` resume(prompt, draft_rows) could keep, without changing anything: its common prefix with
    // the sequence's tokens, with draft_rows bounded by the NextN layer's rows written from the trunk (checkpoints
    // may keep fewer).
    int64_t resumable(const std::vector<int32_t> & prompt, bool draft_rows) const;
    const Checkpoints & checkpoints() const { return checkpoints_; }
    // Host memory one checkpoint takes: the trunk's KDA conv windows and states, and one hidden row.
    // (A prompt's end also keeps its last row's logits, n_vocab floats.)
    size_t checkpoint_bytes() const { return cache_.recurrent_bytes() + model_.hp.n_embd * sizeof(float); }

    // Writes draft-head rows (hidden[i], next_tokens[i]) at positions pos0.. (hidden: [n, n_embd] row-major,
    // post-norm trunk states or a previous step's z; `from_trunk` says which) into the draft cache, dropping any
    // rows after them.
    // With saved_pools (n must be 1) the row attends exactly the selection row saved_p0 made (index sharing).
    // The answer for the last row goes to `out` (reused by callers step after step; `hidden` may point into out.z:
    // it is read before `out` is written). Throws std::invalid_argument if the file has no NextN layer, pos0
    // leaves a gap, or n_ctx is exceeded.
    void draft_rows(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0,
                    const int32_t * saved_pools, int64_t saved_p0, bool from_trunk, DraftOutput & out);

    // The whole sequence as bytes (runtime/sequence_state.h), and back: load_state replaces the sequence with the
    // saved one, so that a prompt sharing a prefix with it resumes as it would on the engine that saved it. Both
    // throw std::logic_error while a verify pass is pending; load_state throws std::invalid_argument, saying why
    // and leaving the sequence as it was, for bytes that are not a saved sequence or one of another model (cache
    // layout, embedding length, vocabulary) or longer than n_ctx.
    std::vector<uint8_t> save_state() const;
    void load_state(const uint8_t * data, size_t size);

    void reset();
    uint32_t n_past() const { return cache_.n_past(); }
    const std::vector<int32_t> & tokens() const { return tokens_; }  // the sequence's tokens, one per trunk row
    uint32_t n_vocab() const { return model_.hp.n_vocab; }
    uint32_t n_embd() const { return model_.hp.n_embd; }
    const EngineParams & params() const { return params_; }

    bool has_draft_head() const { return draft_cache_ != nullptr; }
    // Graph splits of the last graph run (1 when every op ran on one device).
    int n_splits() const { return ggml_backend_sched_get_n_splits(last_->sched()); }
    // Graphs built and allocated since load (the one at load not counted): a ubatch of the shape of the graph
    // before runs that graph again (runtime/graph_slot.h).
    int64_t n_graphs_built() const { return graphs_->n_built(); }
    // What crossed devices in the last graph: its splits and, if it ran while profile_traffic was on, the bytes
    // copied and the copy time (else 0 and -1).
    GraphTraffic traffic() const { return {n_splits(), last_->bytes_copied(), last_->copy_seconds()}; }
    // Measures the traffic of every graph run from now on (runtime/traffic.h: each device syncs after every node,
    // so compute is slower while on). For glm5next-bench, not for serving.
    void profile_traffic(bool on);
    // Per device that holds weights, caches or compute buffers: the bytes of each (CPU last).
    std::vector<DeviceMemory> memory() const;
    const DraftWeights * draft_weights() const { return draft_weights_.get(); }  // null without a draft head
    bool index_share_mtp() const { return model_.hp.index_share_mtp; }
    const SeqCache & cache() const { return cache_; }
    int64_t n_top_pool() const { return model_.hp.idx_top_k / model_.hp.idx_kpool; }

private:
    void reserve();
    void check_tokens(const int32_t * tokens, int64_t n) const;
    void check_no_pending_verify() const;
    // resume's bounds: the prompt's common prefix with tokens_, and the draft head's rows written from the trunk
    // (+ 1: row c-1 is rewritten; INT64_MAX without a draft head)
    int64_t common_prefix(const std::vector<int32_t> & prompt) const;
    int64_t draft_rows_end() const;
    // Runs one ubatch of the trunk and reads its outputs into `out` from row row0; returns the KDA snapshots
    // when built for a verify pass.
    std::vector<KdaSnapshots> eval_ubatch(const int32_t * tokens, int64_t n, bool logits_all, EvalOutput & out,
                                          int64_t row0, bool snapshots);

    const Model & model_;
    const Model & draft_model_;  // the file the draft head's weights come from (model_ unless -md)
    EngineParams params_;
    SeqCache cache_;
    std::unique_ptr<SeqCache> draft_cache_;  // the NextN layer's rows; null without one
    std::unique_ptr<DraftWeights> draft_weights_;
    std::vector<int32_t> tokens_;
    std::vector<int32_t> pending_tokens_;  // the rows of a verify pass awaiting commit
    std::vector<float> pending_hidden_;  // their post-norm hidden states [n, n_embd] (last_hidden_ at commit)
    std::vector<float> last_hidden_;   // post-norm hidden state of row n_past-1
    int64_t draft_from_trunk_ = 0;     // draft-cache rows [0, this) were written from trunk hidden states
    Checkpoints checkpoints_;
    std::vector<ggml_backend_t> backends_;  // the placed devices', then the CPU's
    ggml_backend_t cpu_ = nullptr;
    // Schedulers per shape class, each keeping its last graph for the next ubatch of its shape
    // (runtime/graph_slot.h).
    std::unique_ptr<GraphSlots> graphs_;
    GraphSlot * last_ = nullptr;  // the one that ran last
    bool profile_traffic_ = false;
};

}  // namespace glm5next
