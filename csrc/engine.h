// Runs the trunk over a token sequence: prefill in ubatches of n_batch rows, then decode, appending to one
// sequence's caches (runtime.md, Engine).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "draft_weights.h"
#include "kv_cache.h"
#include "model.h"

namespace glm5next {

struct EngineParams {
    uint32_t n_ctx = 4096;
    uint32_t n_batch = 512;  // rows per ubatch
    int n_threads = 0;       // 0 = hardware concurrency
    ggml_type draft_type = GGML_TYPE_COUNT;  // the draft layer as stored, or requantized (q8_0 / q4_0)
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
    // Throws std::invalid_argument for an empty input, a token id out of range or a context overflow.
    EvalOutput eval(const std::vector<int32_t> & tokens, bool logits_all);

    // How many leading rows of a verify pass to keep (1..n), decided from its output.
    using KeepRows = std::function<int64_t(const EvalOutput &)>;

    // A verify pass (runtime.md, draft-MTP round): evaluates `tokens` (one ubatch) with per-row KDA snapshots,
    // then keeps only the first keep(output) rows: KDA conv windows and states jump to that row's snapshot (no
    // replay) and the attention rows after it are dropped. Writes logits and hidden of every row into `out`, whose
    // buffers a caller reuses round after round (no [n, n_vocab] allocation per round).
    void verify(const std::vector<int32_t> & tokens, const KeepRows & keep, EvalOutput & out);

    // Writes draft-head rows (hidden[i], next_tokens[i]) at positions pos0.. (hidden: [n, n_embd] row-major,
    // post-norm trunk states or a previous step's z) into the draft cache, dropping any rows after them.
    // With saved_pools (n must be 1) the row attends exactly the selection row saved_p0 made (index sharing).
    // The answer for the last row goes to `out` (reused by callers step after step; `hidden` may point into out.z:
    // it is read before `out` is written). Throws std::invalid_argument if the file has no NextN layer, pos0
    // leaves a gap, or n_ctx is exceeded.
    void draft_rows(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0,
                    const int32_t * saved_pools, int64_t saved_p0, DraftOutput & out);

    void reset() {
        cache_.clear();
        tokens_.clear();
        if (draft_cache_) draft_cache_->clear();
    }
    uint32_t n_past() const { return cache_.n_past; }
    const std::vector<int32_t> & tokens() const { return tokens_; }  // the sequence's tokens, one per trunk row
    uint32_t n_vocab() const { return model_.hp.n_vocab; }
    uint32_t n_embd() const { return model_.hp.n_embd; }
    const EngineParams & params() const { return params_; }

    bool has_draft_head() const { return draft_cache_ != nullptr; }
    bool index_share_mtp() const { return model_.hp.index_share_mtp; }
    const SeqCache & cache() const { return cache_; }
    int64_t n_top_pool() const { return model_.hp.idx_top_k / model_.hp.idx_kpool; }

private:
    void alloc(ggml_cgraph * gf);
    void compute(ggml_cgraph * gf);
    void check_tokens(const int32_t * tokens, int64_t n) const;
    void eval_ubatch(const int32_t * tokens, int64_t n, bool logits_all, EvalOutput & out, int64_t row0,
                     const KeepRows * keep);

    const Model & model_;
    const Model & draft_model_;  // the file the draft head's weights come from (model_ unless -md)
    EngineParams params_;
    SeqCache cache_;
    std::unique_ptr<SeqCache> draft_cache_;  // the NextN layer's rows; null without one
    std::unique_ptr<DraftWeights> draft_weights_;
    std::vector<int32_t> tokens_;
    ggml_backend_t backend_ = nullptr;
    ggml_gallocr_t galloc_ = nullptr;
    std::vector<uint8_t> meta_;  // memory of the per-ubatch graph context (tensor and graph metadata only)
};

}  // namespace glm5next
