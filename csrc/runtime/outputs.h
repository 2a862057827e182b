// What a trunk or draft-head graph gives back of one sequence's rows (runtime/engine.h).
#pragma once

#include <cstdint>
#include <vector>

namespace glm5next {

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

}  // namespace glm5next
