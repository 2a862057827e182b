#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace glm5next {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The draft's confidence: the largest probability of softmax(logits), whatever the sampler (greedy included).
float top_probability(const std::vector<float> & logits) {
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(double(l - max_logit));
    return float(1.0 / sum);
}

}  // namespace

Generator::Generator(Engine & engine, const SpecParams & spec, const SamplerParams & sampling)
    : engine_(engine), spec_(spec), sampler_(sampling) {
    if (spec_.n_max < 0 || spec_.n_max + 1 > (int) engine.params().n_batch) {
        throw std::invalid_argument("spec n_max = " + std::to_string(spec_.n_max) + ": must be >= 0 and < n_batch");
    }
    if (spec_.n_max > 0) {
        const bool share = spec_.index_share < 0 ? engine.index_share_mtp() : spec_.index_share > 0;
        chain_ = std::make_unique<DraftChain>(engine, share);
    }
}

void Generator::draft(int64_t n_max) {
    Draft & d = draft_;
    d.tokens.clear();
    if ((int64_t) d.q.size() < n_max) d.q.resize(n_max);
    const int64_t n_vocab = engine_.n_vocab();
    const DraftOutput * out = &chain_->begin(pending_h_.data(), pending_x_.data(), (int64_t) pending_x_.size(),
                                             pending_pos_);
    for (int64_t k = 0; k < n_max; ++k) {
        if (k > 0) out = &chain_->next(d.tokens.back());
        if (spec_.p_min > 0.0f && top_probability(out->logits) < spec_.p_min) {
            break;
        }
        if (sampler_.greedy()) {  // the argmax itself: no [n_vocab] one-hot distribution (accept compares tokens)
            d.tokens.push_back(sampler_.sample(out->logits.data(), n_vocab));
            continue;
        }
        std::vector<float> & q = d.q[k];
        sampler_.distribution(out->logits.data(), n_vocab, q);
        d.tokens.push_back(sampler_.sample_from(q));
    }
}

int64_t Generator::synthetic_keep(int64_t n_drafts) {
    const float a = std::min<float>(spec_.synthetic_accepted, (float) n_drafts);
    const int64_t lo = (int64_t) std::floor(a);
    const double frac = a - (double) lo;
    const bool up = double(synthetic_rng_() >> 11) * 0x1.0p-53 < frac;
    return std::min<int64_t>(n_drafts, lo + (up ? 1 : 0)) + 1;
}

int32_t Generator::start(const std::vector<int32_t> & prompt, bool cache_prompt) {
    const int64_t n_embd = engine_.n_embd();
    if (prompt.empty()) throw std::invalid_argument("eval: no tokens");
    started_ = false;
    stats_ = SpecStats();
    stats_.drafted_at.assign(spec_.n_max, 0);
    stats_.accepted_at.assign(spec_.n_max, 0);
    stats_.n_prompt = (int64_t) prompt.size();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> h_before;  // the post-norm hidden state of the row before the first one evaluated
    int64_t c = 0;
    if (cache_prompt) {
        c = engine_.resume(prompt, chain_ != nullptr, h_before);
    } else {
        engine_.reset();
    }
    stats_.n_cached = c;
    EvalOutput out = engine_.eval(std::vector<int32_t>(prompt.begin() + c, prompt.end()), false);
    stats_.prompt_ms = ms_since(t0);
    if (cache_prompt) engine_.checkpoint();

    // Draft rows (h_p, x_{p+1}) wait to be written with the next step 0: from the row before the first one
    // evaluated (the NextN layer's rows before it were kept), or from position 0.
    pending_pos_ = c > 0 ? c - 1 : 0;
    pending_h_.clear();
    pending_x_.clear();
    if (chain_) {
        if (c > 0) pending_h_ = h_before;
        pending_h_.insert(pending_h_.end(), out.hidden.begin(), out.hidden.end() - n_embd);
        pending_x_.assign(prompt.begin() + pending_pos_ + 1, prompt.end());
        if (cache_prompt) write_pending_rows();  // now, so that the prompt-end checkpoint can serve drafting
    }
    h_last_.assign(out.hidden.end() - n_embd, out.hidden.end());
    next_ = sampler_.sample(out.logits.data(), engine_.n_vocab());
    started_ = true;
    return next_;
}

void Generator::write_pending_rows() {
    if (!chain_ || pending_x_.empty()) return;
    engine_.draft_rows(pending_h_.data(), pending_x_.data(), (int64_t) pending_x_.size(), pending_pos_, nullptr, -1,
                       /*from_trunk=*/true, rows_out_);
    pending_pos_ += (int64_t) pending_x_.size();
    pending_h_.clear();
    pending_x_.clear();
}

void Generator::finish() {
    if (started_) write_pending_rows();
}

int64_t Generator::room() const {
    return started_ ? (int64_t) engine_.cache().n_ctx() - (int64_t) engine_.n_past() : 0;
}

std::vector<int32_t> Generator::step(int64_t max_tokens) {
    using clock = std::chrono::steady_clock;
    if (room() <= 0) {
        throw std::invalid_argument(started_ ? "the context is full" : "step() before start()");
    }
    const int64_t P = engine_.n_past();
    draft_.tokens.clear();
    if (chain_) {  // step 0 is the row (h_{P-1}, next); the pending rows before it are written with it
        pending_h_.insert(pending_h_.end(), h_last_.begin(), h_last_.end());
        pending_x_.push_back(next_);
        const auto t0 = clock::now();
        // no draft past the context or past what the request may still produce (the round emits drafts + 1)
        draft(std::min<int64_t>({spec_.n_max, room() - 1, std::max<int64_t>(0, max_tokens - 1)}));
        stats_.draft_ms += ms_since(t0);
        if ((int64_t) draft_.tokens.size() < spec_.n_min) draft_.tokens.clear();
    }

    std::vector<int32_t> batch = {next_};
    batch.insert(batch.end(), draft_.tokens.begin(), draft_.tokens.end());
    const auto t0 = clock::now();
    engine_.verify(batch, verify_out_);
    const std::vector<int32_t> emitted = accept(verify_out_);
    engine_.commit((int64_t) emitted.size());
    stats_.verify_ms += ms_since(t0);

    count(emitted);
    carry(emitted, P);
    return emitted;
}

std::vector<int32_t> Generator::accept(const EvalOutput & verified) {
    const int64_t n_vocab = engine_.n_vocab(), n_d = (int64_t) draft_.tokens.size();
    const float * logits = verified.logits.data();
    std::vector<int32_t> emitted;
    if (spec_.synthetic_accepted >= 0 && n_d > 0) {
        const int64_t keep = synthetic_keep(n_d);
        emitted.assign(draft_.tokens.begin(), draft_.tokens.begin() + (keep - 1));
        emitted.push_back(sampler_.sample(logits + (keep - 1) * n_vocab, n_vocab));
        return emitted;
    }
    for (int64_t i = 0; i < n_d; ++i) {
        if (sampler_.greedy()) {  // exact match with the target's argmax (speculative sampling with one-hot p, q)
            const int32_t target = sampler_.sample(logits + i * n_vocab, n_vocab);
            emitted.push_back(target);
            if (target != draft_.tokens[i]) return emitted;
            continue;
        }
        sampler_.distribution(logits + i * n_vocab, n_vocab, p_);
        if (!sampler_.accept_draft(p_, draft_.q[i], draft_.tokens[i])) {
            emitted.push_back(sampler_.sample_residual(p_, draft_.q[i]));
            return emitted;
        }
        emitted.push_back(draft_.tokens[i]);
    }
    emitted.push_back(sampler_.sample(logits + n_d * n_vocab, n_vocab));  // the bonus token
    return emitted;
}

void Generator::count(const std::vector<int32_t> & emitted) {
    if (draft_.tokens.empty()) return;
    const int64_t n_acc = (int64_t) emitted.size() - 1;
    ++stats_.n_rounds;
    stats_.n_drafted += (int64_t) draft_.tokens.size();
    stats_.n_accepted += n_acc;
    for (size_t i = 0; i < draft_.tokens.size(); ++i) ++stats_.drafted_at[i];
    for (int64_t i = 0; i < n_acc; ++i) ++stats_.accepted_at[i];
}

void Generator::carry(const std::vector<int32_t> & emitted, int64_t P) {
    const int64_t n_embd = engine_.n_embd();
    const int64_t n_acc = (int64_t) emitted.size() - 1;
    const EvalOutput & v = verify_out_;
    if (chain_) {
        // The accepted rows' draft rows are rewritten from the trunk's hidden states (row P+i pairs verify row i
        // with x_{P+i+1}); the provisional rows after them are dropped.
        pending_pos_ = P;
        pending_h_.assign(v.hidden.begin(), v.hidden.begin() + n_acc * n_embd);
        pending_x_.assign(emitted.begin(), emitted.begin() + n_acc);
    }
    h_last_.assign(v.hidden.begin() + n_acc * n_embd, v.hidden.begin() + (n_acc + 1) * n_embd);
    next_ = emitted.back();
}

}  // namespace glm5next
