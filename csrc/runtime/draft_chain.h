// The chain of NextN draft steps of one round (docs/runtime.md, draft-MTP round, step 1; docs/model.md, NextN draft
// head and index_share_for_mtp_iteration): step 0 is the row (h_p0, x_{p0+1}) at p0, written together with the rows
// still pending before it; step k >= 1 is the row (z_{k-1}, d_k) at p0 + k, where d_k is the token drafted from step
// k-1's output and z_{k-1} that step's output, and attends exactly step 0's selection S(p0) with index sharing, or
// runs the head's own indexer without it. The caller picks each drafted token from the step's output (greedy,
// sampled, or by a test) and hands it to the next step.
// Each step is a DraftPart (runtime/engine.h): a Generator, alone or in a Batch (runtime/batch.h), runs begin_part,
// then began(), and next_part, then stepped(), so that a batch runs several sequences' steps in one graph;
// begin() / next() run a step alone, for inspection only (_core.DraftChain, Model.draft).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/engine.h"

namespace glm5next {

class DraftChain {
public:
    // Throws std::invalid_argument when the engine has no draft head.
    DraftChain(Sequence & seq, bool share);

    // Step 0: writes the draft-head rows (hidden[i], next_tokens[i]) at positions pos0 .. pos0 + n - 1 (hidden:
    // [n, n_embd] row-major, trunk post-norm states); the last row is step 0, at p0 = pos0 + n - 1. Returns its
    // output (valid until the next call). Throws as Sequence::draft_rows.
    const DraftOutput & begin(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0);

    // The next step, on (z of the step before, `drafted`): `drafted` is the token chosen from that step's output.
    // Throws std::logic_error before begin().
    const DraftOutput & next(int32_t drafted);

    // begin()'s last ubatch as a part of a batch (n <= n_batch rows; the rows before pos0 written already), and
    // what follows once it ran.
    DraftPart begin_part(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0);
    void began();
    // next(drafted) as a part of a batch, and what follows once it ran. Throws std::logic_error before began().
    DraftPart next_part(int32_t drafted);
    void stepped() { ++step_; }

    const DraftOutput & out() const { return out_; }
    int64_t step() const { return step_; }  // the step whose output is current (0 after begin)
    // The position whose selection the current step attends: p0 for shared steps, else its own row p0 + step.
    int64_t selection_pos() const { return share_ && step_ > 0 ? p0_ : p0_ + step_; }

private:
    Sequence & seq_;
    bool share_;
    int64_t p0_ = -1;
    int64_t step_ = -1;
    int32_t drafted_ = -1;              // the token of next_part's row
    DraftOutput out_;                   // reused step after step
    std::vector<int32_t> saved_pools_;  // S(p0), step 0's selection
};

}  // namespace glm5next
