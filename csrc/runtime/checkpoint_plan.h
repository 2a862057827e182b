// Where a prompt's evaluation keeps context checkpoints besides its end and every checkpoint_every rows: where a
// later request will part from the sequence (docs/runtime.md, prompt cache on chats; issue 25). A chat template may
// render earlier turns differently from how they were generated (GLM's open <think> in the generation prompt and
// render the answer without it; they drop the reasoning of the turns before the last user message), so the next
// turn parts before this prompt's end, and the KDA states can only go back to a checkpoint. llama-server places
// them the same way: at the last user message and a few tokens before the prompt's end.
#pragma once

#include <cstdint>
#include <vector>

namespace glm5next {

struct Vocab;

// Rows are sequence lengths: a checkpoint at row r holds the sequence of prompt[:r] (before prompt[r]).
struct CheckpointPlan {
    std::vector<int64_t> rows;  // ascending, each in (from, prompt size)
    int64_t anchor = -1;        // the row of `rows` at the last user message's start, or -1 (Checkpoint::anchor)
};

// Rows that always stay this far from a prompt's end: a template's generation prompt (GLM: "<|assistant|>\n<think>")
// is shorter, and a raw prompt whose last word is continued tokenizes differently only at its end (llama-server's 4).
constexpr int64_t kTailRows = 4;

// The plan for evaluating prompt[from:] (`from`: the rows resumed from the cache) with the role tokens of `vocab`:
//  - the start of the last message: before the generation prompt, where the next turn's re-rendered answer parts;
//  - the start of the last user message (the anchor): where the next turn parts when the template drops the
//    reasoning of the answers after it, and the one eviction keeps longest (runtime/checkpoints.h);
//  - kTailRows before the end, unless a message starts within 2 * kTailRows of it (a raw prompt, or a chat that
//    does not end in a generation prompt).
// Rows at or before `from` or below 1 are left out (the sequence is already past them).
CheckpointPlan plan_checkpoints(const std::vector<int32_t> & prompt, int64_t from, const Vocab & vocab);

}  // namespace glm5next
