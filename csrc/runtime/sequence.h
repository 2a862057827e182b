// One sequence on an Engine (docs/runtime.md, Engine; issue 24): what is its own and nothing else's: its tokens, the
// trunk's and the NextN layer's caches, its context checkpoints, the rows of a verify pass awaiting commit, the
// hidden state its next draft-head row needs. The Engine (runtime/engine.h) holds what all sequences share (weights,
// devices, graphs, threads) and runs the graphs; several sequences' rows go through one graph (Engine::run_trunk,
// run_draft). The methods here that evaluate rows run a graph of this sequence alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/checkpoint_plan.h"
#include "runtime/checkpoints.h"
#include "runtime/outputs.h"
#include "runtime/seq_cache.h"
#include "runtime/sequence_state.h"

namespace glm5next {

class Engine;
class GraphSlot;

struct SequenceParams {
    uint32_t n_ctx = 4096;
    uint32_t n_checkpoints = 32;      // context checkpoints kept (llama-server's --ctx-checkpoints); 0 = none
    uint32_t checkpoint_every = 8192; // while prefilling, a checkpoint at every multiple of this row (llama.cpp's 8192)
    // The NextN layer's caches, where drafting can happen (--spec-type draft-mtp); false: none, as for a file without
    // a NextN layer (issue 27: at n_ctx 32k they were 47% of a sequence's caches that never drafts).
    bool draft_rows = true;
    // The type of the attention caches' rows: the MLA latent, the indexer keys and gates (the pooled keys stay f32)
    // (llama-server's -ctk; docs/runtime.md, Engine). f16 by default, as llama.cpp's caches; f32, bf16, q8_0 and
    // q4_0 on request (quantized rows need widths that are whole blocks of 32).
    // The KDA conv windows and states stay f32: a recurrent state is rewritten every row, so a rounding would
    // compound along the sequence.
    ggml_type cache_type = GGML_TYPE_F16;
};

// A cache type by ggml's name ("f16", "bf16", "f32", "q8_0", "q4_0": the types a sequence keeps,
// SequenceParams::cache_type).
// Throws std::invalid_argument naming any other name.
ggml_type cache_type_from_name(const std::string & name);

class Sequence {
public:
    // An empty sequence of n_ctx rows on `engine` (which must outlive it): its caches allocated on the devices of
    // their layers. Throws std::invalid_argument for n_ctx out of [1, kMaxContext] or checkpoint_every 0, and
    // std::runtime_error when a device cannot hold the caches.
    Sequence(Engine & engine, const SequenceParams & params);
    ~Sequence();
    Sequence(const Sequence &) = delete;
    Sequence & operator=(const Sequence &) = delete;

    // Appends `tokens` to the sequence and returns logits (all rows or the last), hidden states and selections,
    // in ubatches of n_batch rows (cut at every multiple of checkpoint_every, where a checkpoint is kept).
    // Throws std::invalid_argument for an empty input, a token id out of range or a context overflow, and
    // std::logic_error while a verify pass awaits its commit.
    EvalOutput eval(const std::vector<int32_t> & tokens, bool logits_all);

    // The verify pass (docs/runtime.md, draft-MTP round, step 2) for a caller outside a Generator
    // (`_core.Seq.verify`); a Generator builds the same TrunkPart in verify_part. Evaluates `tokens` (one
    // ubatch) as provisional rows with per-row KDA snapshots and writes the logits and hidden states of every row
    // into `out`, whose buffers a caller reuses round after round (no [n, n_vocab] allocation per round). The
    // caller decides how many rows to keep and calls commit(n_keep) before anything else runs on the sequence.
    // Throws std::invalid_argument for rows that do not fit one ubatch or the context, or a bad token id.
    void verify(const std::vector<int32_t> & tokens, EvalOutput & out);

    // Keeps the first n_keep rows of the pending verify pass (1 <= n_keep <= its rows) and rolls the caches back
    // past them (SeqCache::commit): no replay. Throws std::logic_error without a pending pass.
    void commit(int64_t n_keep);

    // Keeps a checkpoint of the sequence as it is now (n_past >= 1; no verify pass pending): what a later request
    // sharing this prefix resumes from. Made at the end of every prompt, and every checkpoint_every rows.
    // `logits`: the last row's [n_vocab], kept with it (a prompt's end), or empty. `anchor`: see Checkpoint.
    void checkpoint(std::vector<float> logits = {}, bool anchor = false);

    // The rows where the prompt about to be evaluated keeps checkpoints besides every multiple of checkpoint_every
    // (runtime/checkpoint_plan.h): prompt ubatches end there and checkpoint_if_due keeps one. Replaces the
    // previous plan; reset() and an empty plan end it.
    void plan_checkpoints(CheckpointPlan plan) { plan_ = std::move(plan); }

    // Prepares the sequence for `prompt`: keeps the longest prefix it can resume from and returns its length c
    // (0: the sequence was reset), so that prompt[c:] is what is left to evaluate. The rows kept are those of
    // prompt[:c] exactly: c is at most the common prefix of the sequence's tokens and the prompt, and it is the
    // current length or a checkpoint's (the KDA states cannot drop rows). c < prompt.size() (the last token is
    // evaluated again, for its logits) unless a checkpoint at the prompt's end kept its logits: then c is the
    // whole prompt and `logits` receives them [n_vocab] (else it is emptied). With `draft_rows`, the NextN
    // layer's rows before c-1 must also have been written from the trunk (draft_rows from_trunk), so that
    // drafting after a hit is drafting without one. `hidden` receives row c-1's post-norm hidden state [n_embd]
    // (the draft head's row c-1 needs it). `from_checkpoint` (if given) says whether the c rows came from a context
    // checkpoint rather than the sequence as it was.
    int64_t resume(const std::vector<int32_t> & prompt, bool draft_rows, std::vector<float> & hidden,
                   std::vector<float> & logits, bool * from_checkpoint = nullptr);
    // What resume(prompt, draft_rows) would keep, without changing anything: the c it would return.
    int64_t resumable(const std::vector<int32_t> & prompt, bool draft_rows) const;
    const Checkpoints & checkpoints() const { return checkpoints_; }
    // Host memory one checkpoint takes: the trunk's KDA conv windows and states, and one hidden row.
    // (A prompt's end also keeps its last row's logits, n_vocab floats.)
    size_t checkpoint_bytes() const;

    // Writes draft-head rows (hidden[i], next_tokens[i]) at positions pos0.. (hidden: [n, n_embd] row-major,
    // post-norm trunk states or a previous step's z; `from_trunk` says which) into the draft cache, dropping any
    // rows after them, in ubatches of n_batch rows. With saved_pools (n must be 1) the row attends exactly the
    // selection row saved_p0 made (index sharing). The answer for the last row goes to `out` (reused by callers
    // step after step; `hidden` may point into out.z: it is read before `out` is written). Throws
    // std::invalid_argument if the engine has no NextN layer, pos0 leaves a gap, or n_ctx is exceeded.
    void draft_rows(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0,
                    const int32_t * saved_pools, int64_t saved_p0, bool from_trunk, DraftOutput & out);

    // The whole sequence as bytes (runtime/sequence_state.h), and back: load_state replaces the sequence with the
    // saved one, so that a prompt sharing a prefix with it resumes as it would on the sequence that saved it. Both
    // throw std::logic_error while a verify pass is pending; load_state throws std::invalid_argument, saying why
    // and leaving the sequence as it was, for bytes that are not a saved sequence or one of another model (cache
    // layout, embedding length, vocabulary) or longer than n_ctx.
    std::vector<uint8_t> save_state() const;
    void load_state(const uint8_t * data, size_t size);

    void reset();
    uint32_t n_past() const { return cache_.n_past(); }
    uint32_t n_ctx() const { return cache_.n_ctx(); }
    const std::vector<int32_t> & tokens() const { return tokens_; }  // one per trunk row
    const SequenceParams & params() const { return params_; }
    Engine & engine() const { return engine_; }
    uint64_t id() const { return id_; }  // unique on its engine (Engine::attach)
    bool has_draft_head() const { return draft_cache_ != nullptr; }
    const SeqCache & cache() const { return cache_; }
    const SeqCache * draft_cache() const { return draft_cache_.get(); }
    // Cache memory (bytes) of this sequence, the trunk's and the NextN layer's.
    size_t cache_bytes() const;

    // --- What Engine::run_trunk / run_draft check and tell (a sequence's part of a graph) ---
    // The rows of the next prompt ubatch when n_left rows remain: n_batch at most, and a ubatch ends at every
    // multiple of checkpoint_every and at every row of the checkpoint plan.
    int64_t prompt_ubatch(int64_t n_left) const;
    // Keeps a checkpoint when the sequence ends at a multiple of checkpoint_every or at a row of the checkpoint
    // plan (after a prompt ubatch).
    void checkpoint_if_due();
    // Throws std::logic_error while a verify pass awaits its commit.
    void check_no_pending_verify() const;
    // A trunk graph appended `n` rows for good (tokens; `hidden_last` [n_embd]: the last row's post-norm hidden).
    void appended(const int32_t * tokens, int64_t n, const float * hidden_last);
    // A trunk graph appended `n` rows provisionally (a verify pass in `slot`, which keeps its KDA snapshots until
    // commit): tokens, hidden [n, n_embd].
    void began_verify(std::vector<KdaSnapshots> snapshots, const int32_t * tokens, int64_t n, const float * hidden,
                      const GraphSlot * slot);
    // Draft-head rows about to be written at pos0.. (the rows after pos0 are dropped); after the graph ran,
    // draft_appended(n).
    void draft_begin(int64_t pos0, int64_t n, bool from_trunk);
    void draft_appended(int64_t n);

private:
    // resume's bounds: the prompt's common prefix with tokens_, and the draft head's rows written from the trunk
    // (+ 1: row c-1 is rewritten; INT64_MAX without a draft head)
    int64_t common_prefix(const std::vector<int32_t> & prompt) const;
    // Where resume(prompt, draft_rows) goes: n_past rows kept, from `checkpoint` (null: the sequence as it is when
    // n_past > 0, a reset when 0); whole: the checkpoint is at the prompt's end with its logits.
    struct ResumePoint {
        int64_t n_past;
        const Checkpoint * checkpoint;
        bool whole;
    };
    ResumePoint resume_point(const std::vector<int32_t> & prompt, bool draft_rows) const;
    int64_t draft_rows_end() const;
    void release_snapshots();

    Engine & engine_;
    uint64_t id_ = 0;
    SequenceParams params_;
    SeqCache cache_;
    std::unique_ptr<SeqCache> draft_cache_;  // the NextN layer's rows; null without one
    std::vector<int32_t> tokens_;
    std::vector<int32_t> pending_tokens_;  // the rows of a verify pass awaiting commit
    std::vector<float> pending_hidden_;    // their post-norm hidden states [n, n_embd] (last_hidden_ at commit)
    const GraphSlot * pending_slot_ = nullptr;  // where their KDA snapshots are
    std::vector<float> last_hidden_;       // post-norm hidden state of row n_past-1
    int64_t draft_from_trunk_ = 0;         // draft-cache rows [0, this) were written from trunk hidden states
    Checkpoints checkpoints_;
    CheckpointPlan plan_;  // of the prompt being evaluated
};

}  // namespace glm5next
