#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace glm5next {

namespace {

// Draft-head rows deferred by rounds without drafts are written together once this many wait (a batch of rows
// costs far less per row than one row: the draft head's weights are read once per batch).
constexpr size_t kDeferredRows = 64;

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The draft's confidence: the largest probability of softmax(logits [n_vocab]), whatever the sampler (greedy
// included).
float top_probability(const float * logits, int64_t n_vocab) {
    const float max_logit = *std::max_element(logits, logits + n_vocab);
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
    return float(1.0 / sum);
}

}  // namespace

Generator::Generator(Engine & engine, const SpecParams & spec, const SamplerParams & sampling, int n_probs,
                     std::vector<LogitBias> logit_bias, std::shared_ptr<DraftLengthPolicy> policy)
    : engine_(engine), spec_(spec), sampler_(sampling), n_probs_(n_probs), logit_bias_(std::move(logit_bias)) {
    check_logit_bias(logit_bias_, engine.n_vocab());
    if (spec_.n_max < 0 || spec_.n_max + 1 > (int) engine.params().n_batch) {
        throw std::invalid_argument("spec n_max = " + std::to_string(spec_.n_max) + ": must be >= 0 and < n_batch");
    }
    if (spec_.n_max > 0) {
        const bool share = spec_.index_share < 0 ? engine.index_share_mtp() : spec_.index_share > 0;
        chain_ = std::make_unique<DraftChain>(engine, share);
        if (spec_.adaptive) {
            if (policy && (policy->n_max() != spec_.n_max || policy->n_min() != std::max(spec_.n_min, 0))) {
                throw std::invalid_argument("draft length policy for n_max " + std::to_string(policy->n_max()) +
                                            ", n_min " + std::to_string(policy->n_min()) + ": the generator has n_max " +
                                            std::to_string(spec_.n_max) + ", n_min " + std::to_string(spec_.n_min));
            }
            policy_ = policy ? std::move(policy) : std::make_shared<DraftLengthPolicy>(spec_.n_max, spec_.n_min);
        }
    }
}

int64_t Generator::synthetic_keep(int64_t n_drafts) {
    const float a = std::min<float>(spec_.synthetic_accepted, (float) n_drafts);
    const int64_t lo = (int64_t) std::floor(a);
    const double frac = a - (double) lo;
    const bool up = double(synthetic_rng_() >> 11) * 0x1.0p-53 < frac;
    return std::min<int64_t>(n_drafts, lo + (up ? 1 : 0)) + 1;
}

int32_t Generator::start(const std::vector<int32_t> & prompt, bool cache_prompt, const uint32_t * mask) {
    const int64_t n_embd = engine_.n_embd();
    if (prompt.empty()) throw std::invalid_argument("eval: no tokens");
    started_ = false;
    drafted_ = false;
    stats_ = SpecStats();
    stats_.drafted_at.assign(spec_.n_max, 0);
    stats_.accepted_at.assign(spec_.n_max, 0);
    stats_.rounds_at_length.assign(spec_.n_max + 1, 0);
    round_end_ = {};
    stats_.n_prompt = (int64_t) prompt.size();
    // Drafting again needs the draft head's rows, which the dormant rounds did not write: not at the price of the
    // cached prompt (a chat's next turn would evaluate its whole history again), at most one ubatch of it
    if (policy_ && policy_->reconsider_due()) {
        const int64_t lost = cache_prompt ? engine_.resumable(prompt, false) - engine_.resumable(prompt, true) : 0;
        if (lost <= engine_.params().n_batch) policy_->reconsider();
    }
    const bool drafting = this->drafting();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> h_before;  // the post-norm hidden state of the row before the first one evaluated
    int64_t c = 0;
    EvalOutput out;
    if (cache_prompt) {
        c = engine_.resume(prompt, drafting, h_before, out.logits);
    } else {
        engine_.reset();
    }
    stats_.n_cached = c;
    if (c < (int64_t) prompt.size()) {
        out = engine_.eval(std::vector<int32_t>(prompt.begin() + c, prompt.end()), false);
    } else {  // the whole prompt resumed, with its last row's logits: nothing to evaluate
        out.hidden = h_before;
    }
    stats_.prompt_ms = ms_since(t0);
    // where the next turn of a chat starts (or the same prompt again), whether or not this prompt resumed
    engine_.checkpoint(out.logits);

    // Draft rows (h_p, x_{p+1}) wait to be written with the next step 0: from the row before the first one
    // evaluated (the NextN layer's rows before it were kept), or from position 0.
    pending_pos_ = c > 0 ? c - 1 : 0;
    pending_h_.clear();
    pending_x_.clear();
    if (drafting && c < (int64_t) prompt.size()) {
        if (c > 0) pending_h_ = h_before;
        pending_h_.insert(pending_h_.end(), out.hidden.begin(), out.hidden.end() - n_embd);
        pending_x_.assign(prompt.begin() + pending_pos_ + 1, prompt.end());
        write_pending_rows();  // now, so that the prompt-end checkpoint can serve drafting
    }
    h_last_.assign(out.hidden.end() - n_embd, out.hidden.end());
    next_ = sampler_.sample(constrained(out.logits.data(), 1, mask), engine_.n_vocab());
    probs_.clear();
    if (n_probs_ >= 0) probs_.push_back(token_probs(out.logits.data(), engine_.n_vocab(), next_, n_probs_));
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

const float * Generator::constrained(const float * raw, int64_t n_rows, const uint32_t * masks) {
    if (masks == nullptr && logit_bias_.empty()) return raw;
    const int64_t n_vocab = engine_.n_vocab();
    constrained_.assign(raw, raw + n_rows * n_vocab);
    for (int64_t i = 0; i < n_rows; ++i) {
        constrain_logits(constrained_.data() + i * n_vocab, n_vocab,
                         masks == nullptr ? nullptr : masks + i * mask_words(n_vocab), logit_bias_);
    }
    return constrained_.data();
}

std::vector<int32_t> Generator::step(int64_t max_tokens) {
    draft(max_tokens);
    return verify((int64_t) draft_.tokens.size());
}

const std::vector<int32_t> & Generator::draft(int64_t max_tokens) {
    const int64_t limit = begin_draft(max_tokens);
    for (int64_t k = 0; k < limit; ++k) {
        if (draft_next(nullptr) < 0) break;
    }
    if ((int64_t) draft_.tokens.size() < spec_.n_min) draft_.tokens.clear();
    return draft_.tokens;
}

int64_t Generator::begin_draft(int64_t max_tokens) {
    if (room() <= 0) {
        throw std::invalid_argument(started_ ? "the context is full" : "draft() before start()");
    }
    if (drafted_) throw std::invalid_argument("draft() twice: verify() the last drafts first");
    round_pos_ = engine_.n_past();
    round_builds_ = engine_.n_graphs_built();
    draft_.tokens.clear();
    draft_limit_ = 0;
    draft_stopped_ = false;
    chain_began_ = false;
    first_ms_ = next_ms_ = 0;
    between_ms_ = round_end_ == std::chrono::steady_clock::time_point{} ? -1.0 : ms_since(round_end_);
    if (chain_ && !drafting()) {  // the policy gave up (in this generation or before): no draft-head rows
        pending_h_.clear();
        pending_x_.clear();
        if (policy_) policy_->observe_dormant();
    }
    if (drafting()) {  // step 0 is the row (h_{P-1}, next); the pending rows before it are written with it
        pending_h_.insert(pending_h_.end(), h_last_.begin(), h_last_.end());
        pending_x_.push_back(next_);
        // no draft past the context or past what the request may still produce (the round emits drafts + 1)
        draft_limit_ = std::min<int64_t>({spec_.n_max, room() - 1, std::max<int64_t>(0, max_tokens - 1)});
        if (policy_) draft_limit_ = policy_->choose((int) draft_limit_);
        if ((int64_t) draft_.q.size() < draft_limit_) draft_.q.resize(draft_limit_);
        const auto t0 = std::chrono::steady_clock::now();
        if (draft_limit_ > 0) {
            began_rows_ = (int64_t) pending_x_.size();
            chain_out_ = &chain_->begin(pending_h_.data(), pending_x_.data(), began_rows_, pending_pos_);
            chain_began_ = true;
            first_ms_ = ms_since(t0);
        } else if (pending_x_.size() >= kDeferredRows) {  // no drafts: the row waits, unless enough wait already
            const int64_t n = (int64_t) pending_x_.size();
            write_pending_rows();
            if (policy_) policy_->observe_rows(n, ms_since(t0));
        }
        stats_.draft_ms += ms_since(t0);
    }
    ++stats_.rounds_at_length[draft_limit_];
    drafted_ = true;
    return draft_limit_;
}

int32_t Generator::draft_next(const uint32_t * mask) {
    if (!drafted_) throw std::invalid_argument("draft_next() without begin_draft()");
    const int64_t k = (int64_t) draft_.tokens.size(), n_vocab = engine_.n_vocab();
    if (draft_stopped_ || k >= draft_limit_) return -1;
    const auto t0 = std::chrono::steady_clock::now();
    if (k > 0) chain_out_ = &chain_->next(draft_.tokens.back());
    const float * logits = chain_out_->logits.data();
    if (mask != nullptr || !logit_bias_.empty()) {  // any q keeps speculative sampling exact; a constrained one is
        draft_logits_.assign(chain_out_->logits.begin(), chain_out_->logits.end());  // accepted more often
        constrain_logits(draft_logits_.data(), n_vocab, mask, logit_bias_);
        logits = draft_logits_.data();
    }
    int32_t token = -1;
    if (spec_.p_min > 0.0f && top_probability(logits, n_vocab) < spec_.p_min) {
        draft_stopped_ = true;
    } else if (sampler_.greedy()) {  // the argmax itself: no [n_vocab] one-hot distribution (accept compares tokens)
        token = sampler_.sample(logits, n_vocab);
    } else {
        sampler_.distribution(logits, n_vocab, draft_.q[k]);
        token = sampler_.sample_from(draft_.q[k]);
    }
    if (token >= 0) draft_.tokens.push_back(token);
    const double ms = ms_since(t0);
    (k == 0 ? first_ms_ : next_ms_) += ms;
    stats_.draft_ms += ms;
    return token;
}

std::vector<int32_t> Generator::verify(int64_t n_keep, const uint32_t * masks) {
    if (!drafted_) throw std::invalid_argument(started_ ? "verify() without draft()" : "verify() before start()");
    if (n_keep < 0 || n_keep > (int64_t) draft_.tokens.size()) {
        throw std::invalid_argument("verify: n_keep = " + std::to_string(n_keep) + " is outside [0, " +
                                    std::to_string(draft_.tokens.size()) + "], the drafts of the round");
    }
    drafted_ = false;
    if (n_keep < spec_.n_min) {  // too short to verify: none is (a fresh sample from the target is exact too)
        draft_.tokens.clear();
        n_keep = 0;
    }
    const int64_t P = round_pos_;
    std::vector<int32_t> batch = {next_};
    batch.insert(batch.end(), draft_.tokens.begin(), draft_.tokens.begin() + n_keep);
    const auto t0 = std::chrono::steady_clock::now();
    engine_.verify(batch, verify_out_);
    const std::vector<int32_t> emitted = accept(constrained(verify_out_.logits.data(), n_keep + 1, masks), n_keep);
    engine_.commit((int64_t) emitted.size());
    const double verify_ms = ms_since(t0);
    stats_.verify_ms += verify_ms;
    probs_.clear();
    if (n_probs_ >= 0) {  // emitted token i came from verify row i (accepted draft, correction or bonus)
        const int64_t n_vocab = engine_.n_vocab();
        for (size_t i = 0; i < emitted.size(); ++i) {
            probs_.push_back(token_probs(verify_out_.logits.data() + i * n_vocab, n_vocab, emitted[i], n_probs_));
        }
    }

    count(emitted);
    observe_round(n_keep, emitted, verify_ms);
    carry(emitted, P);
    round_end_ = std::chrono::steady_clock::now();
    return emitted;
}

std::vector<int32_t> Generator::accept(const float * logits, int64_t n_keep) {
    const int64_t n_vocab = engine_.n_vocab(), n_d = n_keep;
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
    if (n_d < (int64_t) draft_.tokens.size() && !sampler_.greedy()) {
        // draft n_d was cut off because row n_d's mask refuses it: p(d) = 0, a rejection whatever the random draw,
        // so the token comes from the residual as for any rejected draft (greedy: the argmax, as below)
        sampler_.distribution(logits + n_d * n_vocab, n_vocab, p_);
        emitted.push_back(sampler_.sample_residual(p_, draft_.q[n_d]));
        return emitted;
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

void Generator::observe_round(int64_t n_keep, const std::vector<int32_t> & emitted, double verify_ms) {
    if (!policy_ || !drafting()) return;
    const int n_drafted = (int) draft_.tokens.size();
    const bool cold = engine_.n_graphs_built() != round_builds_;  // the round built a graph: not a sample of its cost
    policy_->observe(n_drafted, n_drafted ? (int) emitted.size() - 1 : 0, (int) n_keep + 1, began_rows_, first_ms_,
                     next_ms_, cold ? -1.0 : verify_ms, between_ms_, (int) draft_limit_);
}

void Generator::carry(const std::vector<int32_t> & emitted, int64_t P) {
    const int64_t n_embd = engine_.n_embd();
    const int64_t n_acc = (int64_t) emitted.size() - 1;
    const EvalOutput & v = verify_out_;
    if (chain_began_) {  // (without step 0 this round, nothing was accepted and the pending rows still wait)
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
