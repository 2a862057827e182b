#include "runtime/token_probs.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace glm5next {

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
    const int64_t k = std::min<int64_t>(n_top, n_vocab);
    if (k == 0) return out;
    // the k best in one pass through a heap of k (no [n_vocab] scratch per token); the heap's front is the worst
    // kept, and sort_heap leaves the best first
    const auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::vector<int32_t> & top = out.top_ids;
    top.reserve(k);
    for (int32_t id = 0; id < n_vocab; ++id) {
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
    for (int32_t id : top) out.top_logprobs.push_back(float(double(logits[id]) - log_z));
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
    std::vector<int32_t> & top = out.top_ids;
    for (int32_t id = 0; id < n_vocab; ++id) {
        if (p[id] > 0.0f) top.push_back(id);  // the sampler's survivors: few (top_k, top_p, min_p)
    }
    const auto better = [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
    const size_t k = std::min<size_t>(size_t(n_top), top.size());
    std::partial_sort(top.begin(), top.begin() + k, top.end(), better);
    top.resize(k);
    for (int32_t id : top) out.top_logprobs.push_back(std::log(p[id]));
    return out;
}

}  // namespace glm5next
