// Context checkpoints of one sequence (docs/runtime.md, prompt cache; llama-server's --ctx-checkpoints): the KDA conv
// windows and recurrent states cannot drop rows, so a later request that shares only a prefix of the sequence
// resumes from the newest checkpoint at or before the point where they part, and evaluates the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/seq_cache.h"

namespace glm5next {

// The sequence after trunk.n_past rows: the trunk's recurrent state and the post-norm hidden state of row
// n_past-1 [n_embd] (the draft head's row n_past-1 pairs it with the next token, which the next request brings);
// for a prompt's end also that row's logits [n_vocab], so that the same prompt sent again samples its first
// token from them and evaluates nothing (empty elsewhere).
// `anchor`: made at the start of a chat's last user message (runtime/checkpoint_plan.h), where a later turn parts
// when the template drops the reasoning of the answers after it, however many turns later: eviction keeps it longest.
struct Checkpoint {
    RecurrentState trunk;
    std::vector<float> hidden;
    std::vector<float> logits;
    bool anchor = false;
    uint32_t n_past() const { return trunk.n_past; }
    size_t bytes() const { return trunk.bytes() + (hidden.size() + logits.size()) * sizeof(float); }
};

// At most max_count checkpoints, in row order; adding one beyond drops the oldest (llama-server's policy), except
// the newest anchor (one anchor at a time: a new one makes the older ones ordinary) while others can go.
class Checkpoints {
public:
    explicit Checkpoints(size_t max_count) : max_count_(max_count) {}

    size_t max_count() const { return max_count_; }
    // Keeps `c`, replacing one at the same row and dropping any after it (a checkpoint describes this prefix).
    void add(Checkpoint c);
    // The newest checkpoint at a row in [1, max_row], or nullptr.
    const Checkpoint * newest_at_or_before(int64_t max_row) const;
    // The checkpoint at exactly `row` that holds its row's logits, or nullptr.
    const Checkpoint * with_logits_at(int64_t row) const;
    // Forgets the checkpoints after `row` (the sequence was cut back to it).
    void drop_after(int64_t row);
    void clear() { list_.clear(); }
    size_t size() const { return list_.size(); }
    const Checkpoint & at(size_t i) const { return list_.at(i); }  // in row order
    size_t bytes() const;

private:
    size_t max_count_;
    std::deque<Checkpoint> list_;  // ascending n_past
};

}  // namespace glm5next
