#include "runtime/token_probs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
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
    std::vector<int32_t> ids(n_vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    out.top_ids.assign(ids.begin(), ids.begin() + k);
    for (int32_t id : out.top_ids) out.top_logprobs.push_back(float(double(logits[id]) - log_z));
    return out;
}

}  // namespace glm5next
