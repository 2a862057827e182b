#include "runtime/token_probs.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace glm5next {

namespace {

// The ids of the k largest of v[0..n) (only those > 0 with positive_only), best first, ties to the lower id: one
// pass through a heap of k (no [n] scratch per token); the heap's front is the worst kept, and sort_heap leaves the
// best first.
std::vector<int32_t> best_ids(const float * v, int64_t n, int64_t k, bool positive_only) {
    std::vector<int32_t> top;
    k = std::min(k, n);
    if (k <= 0) return top;
    const auto better = [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
    top.reserve(k);
    for (int32_t id = 0; id < n; ++id) {
        if (positive_only && !(v[id] > 0.0f)) continue;
        if ((int64_t) top.size() < k) {
            top.push_back(id);
            std::push_heap(top.begin(), top.end(), better);
        } else if (better(id, top.front())) {
            std::pop_heap(top.begin(), top.end(), better);
            top.back() = id;
            std::push_heap(top.begin(), top.end(), better);
        }
    }
    std::sort_heap(top.begin(), top.end(), better);
    return top;
}

}  // namespace

TokenProbs token_probs(const float * logits, int64_t n_vocab, int32_t token, int n_top) {
    if (n_top < 0 || n_vocab < 1 || token < 0 || token >= n_vocab) {
        throw std::invalid_argument("token_probs: token " + std::to_string(token) + ", n_top " +
                                    std::to_string(n_top) + " for a vocabulary of " + std::to_string(n_vocab));
    }
    const float max_logit = *std::max_element(logits, logits + n_vocab);
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
    const double log_z = double(max_logit) + std::log(sum);
    TokenProbs out;
    out.token = token;
    out.logprob = float(double(logits[token]) - log_z);
    out.top_ids = best_ids(logits, n_vocab, n_top, false);
    for (int32_t id : out.top_ids) out.top_logprobs.push_back(float(double(logits[id]) - log_z));
    return out;
}

TokenProbs sampled_token_probs(const std::vector<float> & p, int32_t token, int n_top) {
    const int64_t n_vocab = (int64_t) p.size();
    if (n_top < 0 || n_vocab < 1 || token < 0 || token >= n_vocab || !(p[token] > 0.0f)) {
        throw std::invalid_argument("sampled_token_probs: token " + std::to_string(token) + ", n_top " +
                                    std::to_string(n_top) + " for a distribution over " + std::to_string(n_vocab) +
                                    " tokens" + (token >= 0 && token < n_vocab ? " that gives it no probability" : ""));
    }
    TokenProbs out;
    out.token = token;
    out.logprob = std::log(p[token]);
    out.top_ids = best_ids(p.data(), n_vocab, n_top, true);  // of the sampler's survivors (top_k, top_p, min_p)
    for (int32_t id : out.top_ids) out.top_logprobs.push_back(std::log(p[id]));
    return out;
}

}  // namespace glm5next
