#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>

namespace glm5next {

namespace {

// "0.95" rather than std::to_string's "0.950000" in error messages.
std::string fmt(float x) {
    std::ostringstream os;
    os << x;
    return os.str();
}

void check_pair(const std::vector<float> & p, const std::vector<float> & q) {
    if (p.empty() || p.size() != q.size()) {
        throw std::invalid_argument("p and q must be non-empty and of one size, got " + std::to_string(p.size()) +
                                    " and " + std::to_string(q.size()));
    }
}

}  // namespace

int32_t argmax(const float * logits, int64_t n_vocab) {
    if (n_vocab < 1) throw std::invalid_argument("logits: n_vocab must be >= 1");
    int64_t best = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
        if (std::isnan(logits[i])) throw std::invalid_argument("logits: NaN at token " + std::to_string(i));
        if (logits[i] > logits[best]) best = i;
    }
    if (!std::isfinite(logits[best])) throw std::invalid_argument("logits: the maximum is not finite");
    return int32_t(best);
}

void constrain_logits(float * logits, int64_t n_vocab, const uint32_t * mask, const std::vector<LogitBias> & bias) {
    for (const LogitBias & b : bias) logits[b.token] += b.bias;
    if (mask == nullptr) return;
    const float minus_inf = -std::numeric_limits<float>::infinity();
    for (int64_t w = 0; w < mask_words(n_vocab); ++w) {
        const uint32_t bits = mask[w];
        if (bits == 0xffffffffu) continue;  // most words of a grammar's mask are all-allowed or all-banned
        const int64_t end = std::min<int64_t>(n_vocab, (w + 1) * 32);
        for (int64_t t = w * 32; t < end; ++t) {
            if (!((bits >> (t - w * 32)) & 1u)) logits[t] = minus_inf;
        }
    }
}

void check_logit_bias(const std::vector<LogitBias> & bias, int64_t n_vocab) {
    for (const LogitBias & b : bias) {
        if (b.token < 0 || b.token >= n_vocab) {
            throw std::invalid_argument("logit_bias: token " + std::to_string(b.token) + " is outside the vocab [0, " +
                                        std::to_string(n_vocab) + ")");
        }
        if (std::isnan(b.bias) || b.bias == std::numeric_limits<float>::infinity()) {
            throw std::invalid_argument("logit_bias: token " + std::to_string(b.token) + " has bias " + fmt(b.bias) +
                                        ": must be a number or -inf (a ban)");
        }
    }
}

Sampler::Sampler(const SamplerParams & params) : params_(params), rng_(params.seed) {
    if (std::isnan(params.temperature)) throw std::invalid_argument("temperature must not be NaN");
    if (params.top_k < 0) throw std::invalid_argument("top_k = " + std::to_string(params.top_k) + ": must be >= 0");
    if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
        throw std::invalid_argument("top_p = " + fmt(params.top_p) + ": must be in (0, 1]");
    }
    if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
        throw std::invalid_argument("min_p = " + fmt(params.min_p) + ": must be in [0, 1]");
    }
}

int32_t Sampler::sample(const float * logits, int64_t n_vocab) {
    if (greedy()) return argmax(logits, n_vocab);
    distribution(logits, n_vocab, p_);
    return sample_from(p_);
}

void Sampler::distribution(const float * logits, int64_t n_vocab, std::vector<float> & p) {
    if (greedy()) {
        const int32_t best = argmax(logits, n_vocab);
        p.assign(size_t(n_vocab), 0.0f);
        p[best] = 1.0f;
        return;
    }
    filter(logits, n_vocab);
    p.assign(size_t(n_vocab), 0.0f);
    for (size_t i = 0; i < cand_.size(); ++i) p[cand_[i]] = prob_[i];
}

void Sampler::filter(const float * logits, int64_t n_vocab) {
    const float max_logit = logits[argmax(logits, n_vocab)];
    const bool use_top_k = params_.top_k > 0 && params_.top_k < n_vocab;
    const bool use_top_p = params_.top_p < 1.0f;
    int64_t n = use_top_k ? params_.top_k : n_vocab;

    cand_.resize(size_t(n_vocab));
    std::iota(cand_.begin(), cand_.end(), 0);
    // Only top_k and top_p need the candidates by probability; min_p alone does not, so skip the sort then (a full
    // sort of a 150k vocabulary costs milliseconds per token).
    if (use_top_k || use_top_p) {
        std::partial_sort(cand_.begin(), cand_.begin() + n, cand_.end(), [logits](int32_t a, int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
    }

    // The filters see the untempered softmax, relative to the most probable token (which gets exp(0) = 1).
    prob_.resize(size_t(n));
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        prob_[i] = std::exp(logits[cand_[i]] - max_logit);
        sum += prob_[i];
    }
    if (use_top_p) {
        const double target = double(params_.top_p) * sum;
        double cum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            cum += prob_[i];
            if (cum >= target) {
                n = i + 1;
                break;
            }
        }
    }
    if (params_.min_p > 0.0f) {
        // Relative to the most probable token, whose prob_ is 1: the threshold is min_p itself, and that token
        // always survives (min_p <= 1), so the set never empties.
        int64_t kept = 0;
        for (int64_t i = 0; i < n; ++i) {
            if (prob_[i] >= params_.min_p) {
                cand_[kept] = cand_[i];
                prob_[kept++] = prob_[i];
            }
        }
        n = kept;
    }
    cand_.resize(size_t(n));
    prob_.resize(size_t(n));
    const float inv_temp = 1.0f / params_.temperature;
    sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        prob_[i] = std::exp((logits[cand_[i]] - max_logit) * inv_temp);
        sum += prob_[i];
    }
    for (float & x : prob_) x = float(x / sum);
}

int32_t Sampler::sample_from(const std::vector<float> & p) {
    double total = 0.0;
    for (float x : p) total += x > 0.0f ? x : 0.0f;
    if (!(total > 0.0)) throw std::invalid_argument("sample_from: p has no positive entry");
    const double u = uniform() * total;
    double cum = 0.0;
    int32_t last = -1;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] > 0.0f) {
            cum += p[i];
            last = int32_t(i);
            if (cum > u) return last;
        }
    }
    return last;  // u within rounding of total: the last token with mass
}

bool Sampler::accept_draft(const std::vector<float> & p, const std::vector<float> & q, int32_t token) {
    check_pair(p, q);
    if (token < 0 || size_t(token) >= p.size()) {
        throw std::invalid_argument("token " + std::to_string(token) + " is outside [0, " + std::to_string(p.size()) + ")");
    }
    const float pd = p[token], qd = q[token];
    if (pd <= 0.0f) return false;
    if (pd >= qd) return true;  // ratio >= 1, also covers q(d) = 0; no random number spent
    return uniform() * qd < pd;
}

int32_t Sampler::sample_residual(const std::vector<float> & p, const std::vector<float> & q) {
    check_pair(p, q);
    residual_.resize(p.size());
    bool any = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const float r = p[i] - q[i];
        residual_[i] = r > 0.0f ? r : 0.0f;
        any = any || r > 0.0f;
    }
    return sample_from(any ? residual_ : p);
}

}  // namespace glm5next
