#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace glm5next {

namespace {

// Draft-head rows deferred by rounds without drafts are written together once this many wait (a batch of rows
// costs far less per row than one row: the draft head's weights are read once per batch).
constexpr int64_t kDeferredRows = 64;

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

Generator::Generator(Sequence & seq, const SpecParams & spec, const SamplerParams & sampling, int n_probs,
                     bool post_sampling_probs, std::vector<LogitBias> logit_bias,
                     std::shared_ptr<DraftLengthPolicy> policy, std::vector<int32_t> end_ids)
    : seq_(seq), engine_(seq.engine()), spec_(spec), sampler_(sampling), end_ids_(std::move(end_ids)),
      n_probs_(n_probs), post_sampling_probs_(post_sampling_probs), logit_bias_(std::move(logit_bias)) {
    check_logit_bias(logit_bias_, engine_.n_vocab());
    if (spec_.n_max < 0 || spec_.n_max + 1 > (int) engine_.params().n_batch) {
        throw std::invalid_argument("spec n_max = " + std::to_string(spec_.n_max) + ": must be >= 0 and < n_batch");
    }
    if (spec_.n_max > 0) {
        const bool share = spec_.index_share < 0 ? engine_.index_share_mtp() : spec_.index_share > 0;
        chain_ = std::make_unique<DraftChain>(seq, share);
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

// ---- the solo API: each phase's part run alone ----

int32_t Generator::start(const std::vector<int32_t> & prompt, bool cache_prompt, const uint32_t * mask) {
    begin_prompt(prompt, cache_prompt);
    TrunkPart part;
    while (prompt_part(part)) {
        const auto t0 = std::chrono::steady_clock::now();
        engine_.run_trunk({part});
        prompt_ran(ms_since(t0));
        run_draft_parts();  // the draft-head rows of the ubatches evaluated so far (prompt_ran)
    }
    const int32_t first = finish_prompt(mask);
    write_pending_rows();  // now, so that the prompt-end checkpoint can serve drafting
    return first;
}

void Generator::drop_pending_rows() {
    pending_h_.clear();
    pending_x_.clear();
    flush_rows_ = prompt_rows_ = flushed_rows_ = 0;
    deferred_flush_ = false;
    flush_ms_ = 0;
}

void Generator::write_pending_rows() {
    if (!chain_ || pending_x_.empty()) return;
    flush_rows_ = (int64_t) pending_x_.size();
    prompt_rows_ = 0;
    run_draft_parts();
}

void Generator::run_draft_parts() {
    DraftPart part;
    while (draft_part(part)) {
        const auto t0 = std::chrono::steady_clock::now();
        engine_.run_draft({part});
        draft_ran(part, ms_since(t0));
    }
}

void Generator::finish() {
    if (started_) write_pending_rows();
}

int64_t Generator::room() const {
    return started_ ? (int64_t) seq_.n_ctx() - (int64_t) seq_.n_past() : 0;
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
    const int64_t limit = begin_round(max_tokens);
    run_draft_parts();
    return limit;
}

int32_t Generator::draft_next(const uint32_t * mask) {
    const int32_t token = sample_draft(mask);
    DraftPart part;
    if (next_step_part(part)) {
        const auto t0 = std::chrono::steady_clock::now();
        engine_.run_draft({part});
        step_ran(ms_since(t0));
    }
    return token;
}

std::vector<int32_t> Generator::verify(int64_t n_keep, const uint32_t * masks) {
    const TrunkPart part = verify_part(n_keep);
    const auto t0 = std::chrono::steady_clock::now();
    engine_.run_trunk({part});
    return verify_ran(masks, ms_since(t0), true, false);
}

// ---- the phases ----

void Generator::begin_prompt(const std::vector<int32_t> & prompt, bool cache_prompt) {
    if (prompt.empty()) throw std::invalid_argument("eval: no tokens");
    engine_.check_tokens(prompt.data(), (int64_t) prompt.size());
    if (prompt.size() > seq_.n_ctx()) {
        throw std::invalid_argument("eval: " + std::to_string(prompt.size()) +
                                    " tokens exceed the context size n_ctx = " + std::to_string(seq_.n_ctx()));
    }
    const auto t0 = std::chrono::steady_clock::now();
    started_ = false;
    drafted_ = false;
    batch_chose_ = false;
    stats_ = SpecStats();
    stats_.drafted_at.assign(spec_.n_max, 0);
    stats_.accepted_at.assign(spec_.n_max, 0);
    stats_.rounds_at_length.assign(spec_.n_max + 1, 0);
    round_end_ = {};
    stats_.n_prompt = (int64_t) prompt.size();
    // Drafting needs the draft head's rows of the prefix it resumes, which rounds without drafting (dormant, quiet or
    // resting ones) did not write: an adaptive generation does not buy them at the price of the cached prompt (a
    // chat's next turn would evaluate that part of its history again). A prompt that loses nothing of the cache to
    // them is a new text: a quiet policy wakes. One that would lose some continues a text that ran without them:
    // the generation rests, unless can_pay is due to be judged anew and at most one ubatch (n_batch) is lost.
    resting_ = false;
    if (chain_ && policy_) {
        const int64_t lost = cache_prompt ? seq_.resumable(prompt, false) - seq_.resumable(prompt, true) : 0;
        if (lost == 0) policy_->wake();
        const bool judged_anew = lost <= engine_.params().n_batch && policy_->reconsider();
        resting_ = lost > 0 && !judged_anew;
    }
    std::vector<float> h_before;  // the post-norm hidden state of the row before the first one evaluated
    int64_t c = 0;
    prompt_out_.logits.clear();
    if (cache_prompt) {
        c = seq_.resume(prompt, drafting(), h_before, prompt_out_.logits, &stats_.from_checkpoint);
    } else {
        seq_.reset();
    }
    stats_.n_cached = c;
    seq_.plan_checkpoints(plan_checkpoints(prompt, c, engine_.model().vocab));  // where later requests may part
    prompt_ = prompt;
    prompt_at_ = c;
    // Draft rows (h_p, x_{p+1}) wait to be written: from the row before the first one evaluated (the NextN layer's
    // rows before it were kept), or from position 0.
    pending_pos_ = pending_from_ = c > 0 ? c - 1 : 0;
    drop_pending_rows();
    if (drafting() && c < (int64_t) prompt.size() && c > 0) {
        pending_h_ = h_before;
        pending_x_.assign(1, prompt[c]);
    }
    h_last_ = h_before;  // the whole prompt resumed: its last row's
    prompting_ = true;
    stats_.prompt_ms = ms_since(t0);
}

bool Generator::prompt_part(TrunkPart & part, int64_t max_rows) {
    const int64_t left = (int64_t) prompt_.size() - prompt_at_;
    if (!prompting_ || left <= 0) return false;
    const int64_t n = std::min(seq_.prompt_ubatch(left), max_rows);
    prompt_out_.n_tokens = n;
    prompt_out_.n_logit_rows = 1;
    prompt_out_.logits.resize(engine_.n_vocab());
    prompt_out_.hidden.resize(n * engine_.n_embd());
    part = TrunkPart{&seq_, prompt_.data() + prompt_at_, n, false, false, &prompt_out_, 0, false};
    return true;
}

void Generator::prompt_ran(double ms) {
    const int64_t n_embd = engine_.n_embd();
    seq_.checkpoint_if_due();
    const int64_t end = prompt_at_ + prompt_out_.n_tokens;
    if (drafting()) {
        // row p pairs h_p with x_{p+1}: every row's next token is the prompt's but the last row's (the first token
        // sampled: finish_prompt). The rows of whole ubatches are written before the next ubatch (start, Batch::begin):
        // the hidden states held stay under two ubatches (issue 51: kept to the first round they took 16 KiB per
        // token on GLM-5.3-Flash, 2 GiB at 128k, and were moved to the front once per ubatch written: O(N^2)).
        pending_h_.insert(pending_h_.end(), prompt_out_.hidden.begin(), prompt_out_.hidden.end());
        pending_x_.insert(pending_x_.end(), prompt_.begin() + prompt_at_ + 1,
                          prompt_.begin() + std::min<int64_t>(end + 1, (int64_t) prompt_.size()));
        note_pending_rows();
        const int64_t n_batch = engine_.params().n_batch;
        flush_rows_ = (int64_t) pending_x_.size() / n_batch * n_batch;
    }
    h_last_.assign(prompt_out_.hidden.end() - n_embd, prompt_out_.hidden.end());
    prompt_at_ = end;
    stats_.prompt_ms += ms;
}

int32_t Generator::finish_prompt(const uint32_t * mask) {
    if (!prompting_ || prompt_at_ < (int64_t) prompt_.size()) throw std::logic_error("the prompt has rows left");
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n_embd = engine_.n_embd();
    // where the next turn of a chat starts (or the same prompt again), whether or not this prompt resumed
    seq_.checkpoint(prompt_out_.logits);
    seq_.plan_checkpoints({});
    if (drafting() && stats_.n_cached < (int64_t) prompt_.size()) {  // the last row pairs with the next token
        pending_h_.resize(pending_h_.size() - n_embd);
        // A prompt of up to a ubatch of rows has them wait for the first round that drafts (begin_round): a
        // generation that rests before one (a batch of four sequences on the bundled model, whose policy is quiet)
        // never writes them, where it used to write them at its first round for nothing (the NextN layer over the
        // prompt once more: 0.5-1.7% of a 4-client run). A longer prompt's (whose whole ubatches were written as it
        // was evaluated) are written at the first round, before its step 0.
        const bool long_prompt = pending_pos_ + (int64_t) pending_x_.size() - pending_from_ > engine_.params().n_batch;
        flush_rows_ = long_prompt ? (int64_t) pending_x_.size() : 0;
        prompt_rows_ = long_prompt ? 0 : (int64_t) pending_x_.size();
    } else {
        pending_h_.clear();
    }
    const int64_t n_vocab = engine_.n_vocab();
    const float * row = constrained(prompt_out_.logits.data(), 1, mask);
    next_ = sampler_.sample(row, n_vocab);
    probs_.clear();
    if (n_probs_ >= 0) probs_.push_back(probs_of(prompt_out_.logits.data(), row, next_));
    prompting_ = false;
    started_ = true;
    stats_.prompt_ms += ms_since(t0);
    return next_;
}

TokenProbs Generator::probs_of(const float * raw, const float * row, int32_t token) {
    const int64_t n_vocab = engine_.n_vocab();
    // synthetic acceptance (benchmarks) keeps drafts the sampler may give no probability: the model's figures then
    if (!post_sampling_probs_ || spec_.synthetic_accepted >= 0) return token_probs(raw, n_vocab, token, n_probs_);
    sampler_.distribution(row, n_vocab, probs_p_);
    return sampled_token_probs(probs_p_, token, n_probs_);
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

int64_t Generator::begin_round(int64_t max_tokens, int batch_drafts, bool batch_dormant) {
    if (room() <= 0) {
        throw std::invalid_argument(started_ ? "the context is full" : "draft() before start()");
    }
    if (drafted_) throw std::invalid_argument("draft() twice: verify() the last drafts first");
    round_pos_ = seq_.n_past();
    round_builds_ = engine_.n_graphs_built();
    batch_chose_ = false;
    draft_.tokens.clear();
    draft_limit_ = 0;
    draft_stopped_ = false;
    chain_began_ = false;
    awaiting_sample_ = false;
    began_rows_ = 0;
    first_ms_ = next_ms_ = 0;
    between_ms_ = round_end_ == std::chrono::steady_clock::time_point{} ? -1.0 : ms_since(round_end_);
    if (batch_dormant && policy_) resting_ = true;  // (a generator that samples with a seed keeps drafting)
    if (chain_ && !drafting()) {  // the policy gave up (in this generation or before): no draft-head rows
        drop_pending_rows();
        if (policy_ && !policy_->can_pay()) policy_->observe_dormant();
    }
    if (drafting()) {  // step 0 is the row (h_{P-1}, next); the pending rows before it are written with it
        pending_h_.insert(pending_h_.end(), h_last_.begin(), h_last_.end());
        pending_x_.push_back(next_);
        // no draft past the context or past what the request may still produce (the round emits drafts + 1)
        draft_limit_ = std::min<int64_t>({spec_.n_max, room() - 1, std::max<int64_t>(0, max_tokens - 1)});
        batch_chose_ = policy_ && batch_drafts >= 0;  // a batch's policy chose for every sequence in it
        if (batch_chose_) {
            draft_limit_ = std::min<int64_t>(draft_limit_, batch_drafts);
        } else if (policy_) {
            draft_limit_ = policy_->choose((int) draft_limit_);
        }
        if ((int64_t) draft_.q.size() < draft_limit_) draft_.q.resize(draft_limit_);
        // no drafts: the row waits, unless enough rounds' rows wait already (a batch of rows costs far less per row
        // than one row); then the prompt's waiting rows go with them. Drafts: the prompt's waiting rows are written
        // before step 0, apart, so that step 0's time stays the round's own (DraftLengthPolicy::observe)
        deferred_flush_ = draft_limit_ == 0 &&
                          (int64_t) pending_x_.size() - prompt_rows_ - flush_rows_ >= kDeferredRows;
        if (deferred_flush_) flush_rows_ = (int64_t) pending_x_.size();
        if (draft_limit_ > 0 && prompt_rows_ > 0) {
            flush_rows_ = prompt_rows_;
            deferred_flush_ = true;
        }
        if (flush_rows_ > 0) prompt_rows_ = 0;
    }
    ++stats_.rounds_at_length[draft_limit_];
    drafted_ = true;
    return draft_limit_;
}

void Generator::abandon_round() {
    drafted_ = false;
    awaiting_sample_ = false;
    batch_chose_ = false;
    if (seq_.cache().verify_pending()) seq_.commit(1);
}

bool Generator::draft_part(DraftPart & part) {
    if (!chain_ || pending_x_.empty()) return false;
    const int64_t n_batch = engine_.params().n_batch, rows = (int64_t) pending_x_.size();
    if (flush_rows_ == 0 && (!drafted_ || draft_limit_ == 0 || chain_began_)) return false;
    // rows written without drafting (a prompt's, deferred ones, or the first ubatches of a long step 0), n_batch at
    // a time; then step 0 with the rest
    note_pending_rows();
    const bool step0 = flush_rows_ == 0 && rows <= n_batch;
    part_rows_ = step0 ? rows : std::min(n_batch, flush_rows_ > 0 ? flush_rows_ : rows);
    if (step0) {
        part = chain_->begin_part(pending_h_.data(), pending_x_.data(), rows, pending_pos_);
        return true;
    }
    part = DraftPart{&seq_, pending_h_.data(), pending_x_.data(), part_rows_, pending_pos_, nullptr, -1,
                     /*from_trunk=*/true, nullptr};
    return true;
}

void Generator::draft_ran(const DraftPart & part, double ms) {
    const int64_t n = part_rows_, n_embd = engine_.n_embd();
    const bool flushed = flush_rows_ > 0;
    pending_h_.erase(pending_h_.begin(), pending_h_.begin() + n * n_embd);
    pending_x_.erase(pending_x_.begin(), pending_x_.begin() + n);
    pending_pos_ += n;
    if (drafted_) stats_.draft_ms += ms;
    if (flushed) {
        flush_rows_ -= n;
        flush_ms_ += ms;
        flushed_rows_ += n;
        if (flush_rows_ == 0 && deferred_flush_ && policy_) policy_->observe_rows(flushed_rows_, flush_ms_);
        if (flush_rows_ == 0) flush_ms_ = 0, flushed_rows_ = 0, deferred_flush_ = false;
        return;
    }
    began_rows_ += n;
    first_ms_ += ms;
    if (part.out != nullptr) {
        chain_->began();
        chain_out_ = &chain_->out();
        chain_began_ = true;
        awaiting_sample_ = true;
    }
}

int32_t Generator::sample_draft(const uint32_t * mask) {
    if (!drafted_) throw std::invalid_argument("draft_next() without begin_draft()");
    const int64_t k = (int64_t) draft_.tokens.size(), n_vocab = engine_.n_vocab();
    if (draft_stopped_ || k >= draft_limit_ || !awaiting_sample_) return -1;
    const auto t0 = std::chrono::steady_clock::now();
    awaiting_sample_ = false;
    const float * logits = chain_out_->logits.data();
    if (mask != nullptr || !logit_bias_.empty()) {  // any q keeps speculative sampling exact; a constrained one is
        draft_logits_.assign(chain_out_->logits.begin(), chain_out_->logits.end());  // accepted more often
        constrain_logits(draft_logits_.data(), n_vocab, mask, logit_bias_);
        logits = draft_logits_.data();
    }
    int32_t token = -1;
    if (spec_.p_min > 0.0f && top_probability(logits, n_vocab) < spec_.p_min) {
        draft_stopped_ = true;
    } else if (keeps_by_match()) {
        token = argmax(logits, n_vocab);  // no [n_vocab] distribution and no random number (accept compares tokens)
    } else {
        sampler_.distribution(logits, n_vocab, draft_.q[k]);
        token = sampler_.sample_from(draft_.q[k]);
    }
    if (token >= 0) {
        draft_.tokens.push_back(token);
        // nothing follows an end of generation: drafting past it would draft what is never emitted
        if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) draft_stopped_ = true;
    }
    const double ms = ms_since(t0);
    (k == 0 ? first_ms_ : next_ms_) += ms;
    stats_.draft_ms += ms;
    return token;
}

bool Generator::next_step_part(DraftPart & part) {
    const int64_t k = (int64_t) draft_.tokens.size();
    if (!drafted_ || !chain_began_ || draft_stopped_ || awaiting_sample_ || k == 0 || k >= draft_limit_) return false;
    part = chain_->next_part(draft_.tokens.back());
    return true;
}

void Generator::step_ran(double ms) {
    chain_->stepped();
    chain_out_ = &chain_->out();
    awaiting_sample_ = true;
    next_ms_ += ms;
    stats_.draft_ms += ms;
}

TrunkPart Generator::verify_part(int64_t n_keep) {
    if (!drafted_) throw std::invalid_argument(started_ ? "verify() without draft()" : "verify() before start()");
    if (n_keep < 0 || n_keep > (int64_t) draft_.tokens.size()) {
        throw std::invalid_argument("verify: n_keep = " + std::to_string(n_keep) + " is outside [0, " +
                                    std::to_string(draft_.tokens.size()) + "], the drafts of the round");
    }
    drafted_ = false;
    awaiting_sample_ = false;
    if (n_keep < spec_.n_min) {  // too short to verify: none is (a fresh sample from the target is exact too)
        draft_.tokens.clear();
        n_keep = 0;
    }
    verify_tokens_.assign(1, next_);
    verify_tokens_.insert(verify_tokens_.end(), draft_.tokens.begin(), draft_.tokens.begin() + n_keep);
    const int64_t n = n_keep + 1;
    verify_out_.n_tokens = verify_out_.n_logit_rows = n;
    verify_out_.logits.resize(n * engine_.n_vocab());
    verify_out_.hidden.resize(n * engine_.n_embd());
    return TrunkPart{&seq_, verify_tokens_.data(), n, true, true, &verify_out_, 0, false};
}

std::vector<int32_t> Generator::verify_ran(const uint32_t * masks, double ms, bool timed, bool batched) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n_keep = (int64_t) verify_tokens_.size() - 1, P = round_pos_;
    const float * rows = constrained(verify_out_.logits.data(), n_keep + 1, masks);
    const std::vector<int32_t> emitted = accept(rows, n_keep);
    seq_.commit((int64_t) emitted.size());
    const double verify_ms = ms + ms_since(t0);
    stats_.verify_ms += verify_ms;
    probs_.clear();
    if (n_probs_ >= 0) {  // emitted token i came from verify row i (accepted draft, correction or bonus)
        const int64_t n_vocab = engine_.n_vocab();
        for (size_t i = 0; i < emitted.size(); ++i) {
            probs_.push_back(probs_of(verify_out_.logits.data() + i * n_vocab, rows + i * n_vocab, emitted[i]));
        }
    }

    count(emitted);
    observe_round(n_keep, emitted, verify_ms, timed, batched);
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
    const bool match = keeps_by_match();
    for (int64_t i = 0; i < n_d; ++i) {
        if (match) {  // the target's token, drawn as plain decoding draws it (greedy: its argmax); kept while equal
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
    if (n_d < (int64_t) draft_.tokens.size() && !match) {
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

void Generator::observe_round(int64_t n_keep, const std::vector<int32_t> & emitted, double verify_ms, bool timed,
                              bool batched) {
    const int n_drafted = (int) draft_.tokens.size();
    // Not a sample of the round's cost: its pass carried a prompt ubatch, or, alone, it built a graph (a one-time
    // cost: alone, a shape once built is kept). Batched, the graphs' shapes follow every sequence's drafts and are
    // built again as they change: a recurring cost of drafting there, counted.
    const bool cold = !timed || (!batched && engine_.n_graphs_built() != round_builds_);
    outcome_ = RoundOutcome{n_drafted, n_drafted ? (int) emitted.size() - 1 : 0, (int) n_keep + 1, began_rows_,
                            first_ms_, next_ms_, cold ? -1.0 : verify_ms, between_ms_, (int) draft_limit_};
    if (policy_ && drafting() && !batch_chose_) tell(*policy_, true);  // (a batch's policy is told by the batch)
}

void Generator::tell(DraftLengthPolicy & policy, bool costs) const {
    const RoundOutcome & o = outcome_;
    if (!costs) {
        policy.observe_acceptance(o.n_drafted, o.n_accepted, o.n_chosen);
        return;
    }
    policy.observe(o.n_drafted, o.n_accepted, o.verify_rows, o.pending_rows, o.first_ms, o.next_ms, o.verify_ms,
                   o.between_ms, o.n_chosen);
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
