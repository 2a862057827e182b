// The target model's log-probabilities of a generated token (OpenAI's logprobs / top_logprobs, llama-server's
// n_probs): log softmax of the raw logits row that produced it, before the sampler's filters and temperature, as
// OpenAI and llama-server report them. With draft-MTP the row is the verify pass's row of that position, so the
// figures are those of plain decoding (bit for bit on the CPU, where a verify row equals its decode row:
// graph/blocks.h, BlockBuilder::mm).
#pragma once

#include <cstdint>
#include <vector>

namespace glm5next {

struct TokenProbs {
    int32_t token = -1;
    float logprob = 0.0f;              // natural log
    std::vector<int32_t> top_ids;      // the n_top most probable tokens, most probable first (ties: lower id)
    std::vector<float> top_logprobs;   // theirs
};

// logits: [n_vocab] raw. Throws std::invalid_argument for n_top < 0, n_vocab < 1 or a token outside [0, n_vocab).
TokenProbs token_probs(const float * logits, int64_t n_vocab, int32_t token, int n_top);

// The same after the sampler (llama-server's post_sampling_probs): p is the distribution the token was drawn from,
// the sampler's filters and temperature applied (Sampler::distribution: one-hot when greedy); the logprobs are
// log p, and the top tokens are the n_top most probable of p's nonzero ones (fewer when fewer survive the filters).
// Throws as token_probs, and for a token p gives no probability.
TokenProbs sampled_token_probs(const std::vector<float> & p, int32_t token, int n_top);

}  // namespace glm5next
