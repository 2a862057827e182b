// Token sampling from one row of logits, and the accept / resample steps of speculative sampling (docs/runtime.md,
// draft-MTP round, step 3). One Sampler per sequence: it owns the RNG, so a seed fixes the whole generation.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace glm5next {

// An additive logit bias for one token (OpenAI's and llama-server's logit_bias): -inf bans the token.
struct LogitBias {
    int32_t token = -1;
    float bias = 0.0f;
};

// 32-bit words of a token bitmask over n_vocab tokens: token t is allowed iff (mask[t / 32] >> (t % 32)) & 1
// (llguidance's and xgrammar's layout).
inline int64_t mask_words(int64_t n_vocab) { return (n_vocab + 31) / 32; }

// One row of logits as the sampler should see it under constraints, in place: logits[t] += bias of t for every
// entry of `bias` (a token listed twice gets both), then -inf for every token `mask` disallows. mask: [mask_words]
// or null (no mask). The row's other logits are untouched, so an unconstrained row costs nothing. Token ids in
// `bias` must be in [0, n_vocab) (checked where the bias is set: check_logit_bias).
void constrain_logits(float * logits, int64_t n_vocab, const uint32_t * mask, const std::vector<LogitBias> & bias);

// Throws std::invalid_argument naming the entry for a token outside [0, n_vocab), a NaN bias or +inf (which
// would make every other token impossible and the softmax NaN; ban tokens with -inf instead).
void check_logit_bias(const std::vector<LogitBias> & bias, int64_t n_vocab);

struct SamplerParams {
    float temperature = 0.8f;  // <= 0: greedy
    int32_t top_k = 40;        // 0 = off
    float top_p = 0.95f;       // 1 = off
    float min_p = 0.05f;       // 0 = off
    uint64_t seed = 0;
};

// Index of the largest logit, the lowest index among equals. Rejects what would make the softmax NaN (a NaN
// logit, a +inf one, or all -inf) and, for the sort in Sampler::filter, what would break its ordering (NaN).
// Throws std::invalid_argument for n_vocab < 1. logits: [n_vocab].
int32_t argmax(const float * logits, int64_t n_vocab);

// Filter chain (temperature > 0), llama.cpp's default order, each filter seeing the survivors of the previous one
// renormalized:
//   1. top_k: keep the k most probable tokens (exact ties broken toward the lower id)
//   2. top_p: keep the smallest most-probable prefix whose softmax(logits) sum reaches top_p
//   3. min_p: keep tokens with probability >= min_p * (probability of the most probable token)
//   4. temperature: p = softmax(logits / temperature) over the survivors.
// Temperature <= 0 is greedy: the argmax, ties to the lowest id, as a one-hot p.
class Sampler {
public:
    // Throws std::invalid_argument for top_k < 0, top_p outside (0, 1], min_p outside [0, 1] or a NaN temperature.
    explicit Sampler(const SamplerParams & params);

    const SamplerParams & params() const { return params_; }
    bool greedy() const { return params_.temperature <= 0.0f; }

    // A token drawn from distribution(logits); greedy is the argmax and draws no random number.
    // logits: [n_vocab]. Throws std::invalid_argument for n_vocab < 1, a NaN logit, or a maximum that is not finite.
    int32_t sample(const float * logits, int64_t n_vocab);

    // p = [n_vocab] filtered, normalized distribution (zeros for filtered-out tokens; one-hot when greedy).
    // p's storage is reused, so a caller that keeps p allocates only on the first call. Throws as sample().
    void distribution(const float * logits, int64_t n_vocab, std::vector<float> & p);

    // A token drawn from p (non-negative, not necessarily normalized, with a positive sum), never one with p = 0.
    // Throws std::invalid_argument for an empty p or one without positive mass.
    int32_t sample_from(const std::vector<float> & p);

    // Speculative sampling (Leviathan et al. 2023): the draft proposed `token` drawn from q; accept it with
    // probability min(1, p(token) / q(token)). On rejection the output token comes from sample_residual(p, q).
    // Together they emit tokens distributed exactly as p, whatever q is. With greedy p and q (one-hot) this is
    // "accept iff the draft equals the target argmax" and draws no random number.
    // p, q: [n_vocab] from distribution(). Throws std::invalid_argument for sizes that differ or a token out of range.
    bool accept_draft(const std::vector<float> & p, const std::vector<float> & q, int32_t token);

    // A token from norm(max(p - q, 0)); when that is all zero (p <= q everywhere, i.e. p == q up to rounding,
    // where a rejection has probability 0), from p instead. Throws as accept_draft.
    int32_t sample_residual(const std::vector<float> & p, const std::vector<float> & q);

private:
    // Fills cand_ (token ids) and prob_ (their normalized probabilities) with the survivors of the filter chain.
    void filter(const float * logits, int64_t n_vocab);
    // Uniform in [0, 1) from the top 53 bits of the engine: std's distributions are implementation-defined, and the
    // same seed must give the same tokens with every standard library.
    double uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

    SamplerParams params_;
    std::mt19937_64 rng_;
    // Reused across calls, so the per-token path does not allocate once warm.
    std::vector<int32_t> cand_;
    std::vector<float> prob_;
    std::vector<float> p_;
    std::vector<float> residual_;
};

}  // namespace glm5next
