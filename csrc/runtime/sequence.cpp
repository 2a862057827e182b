#include "runtime/sequence.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/engine.h"

namespace glm5next {

static constexpr ggml_type kCacheTypes[] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_F32, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};

ggml_type cache_type_from_name(const std::string & name) {
    for (ggml_type t : kCacheTypes) {
        if (name == ggml_type_name(t)) return t;
    }
    throw std::invalid_argument("cache type '" + name + "' is not one this runtime keeps; use f16, bf16, f32, q8_0 "
                                "or q4_0");
}

static const SequenceParams & checked_params(const SequenceParams & params) {
    cache_type_from_name(ggml_type_name(params.cache_type));  // throws, naming it, for a type it does not keep
    if (params.n_ctx == 0 || params.n_ctx > kMaxContext) {
        throw std::invalid_argument("n_ctx = " + std::to_string(params.n_ctx) + " is out of range [1, " +
                                    std::to_string(kMaxContext) + "]");
    }
    if (params.checkpoint_every == 0) throw std::invalid_argument("checkpoint_every must be >= 1");
    return params;
}

Sequence::Sequence(Engine & engine, const SequenceParams & params)
    : engine_(engine), params_(checked_params(params)),
      cache_(engine.model(), 0, engine.model().hp.n_trunk(), params.n_ctx, params.cache_type, &engine.cache_cells()),
      checkpoints_(params.n_checkpoints) {
    if (engine.has_draft_head() && params.draft_rows) {
        const Model & draft = engine.draft_model();
        draft_cache_ = std::make_unique<SeqCache>(draft, draft.hp.n_trunk(), 1, params.n_ctx, params.cache_type,
                                                  engine.draft_cache_cells());
    }
    id_ = engine_.attach(this);
    try {
        engine_.reserve(*this);
    } catch (...) {
        engine_.detach(this);
        throw;
    }
}

Sequence::~Sequence() {
    release_snapshots();
    engine_.detach(this);
}

size_t Sequence::cache_bytes() const {
    size_t n = 0;
    for (const SeqCache * c : {&cache_, (const SeqCache *) draft_cache_.get()}) {
        if (c == nullptr) continue;
        for (const auto & [dev, bytes] : c->bytes_by_device()) n += bytes;
    }
    return n;
}

size_t Sequence::checkpoint_bytes() const { return cache_.recurrent_bytes() + engine_.n_embd() * sizeof(float); }

int64_t Sequence::prompt_ubatch(int64_t n_left) const {
    const int64_t every = params_.checkpoint_every, n_past = cache_.n_past();
    int64_t n = std::min<int64_t>({engine_.params().n_batch, n_left, every - n_past % every});
    const auto next = std::upper_bound(plan_.rows.begin(), plan_.rows.end(), n_past);
    if (next != plan_.rows.end()) n = std::min<int64_t>(n, *next - n_past);
    return n;
}

void Sequence::checkpoint_if_due() {
    const int64_t n_past = cache_.n_past();
    const bool planned = std::binary_search(plan_.rows.begin(), plan_.rows.end(), n_past);
    if (n_past % params_.checkpoint_every == 0 || planned) checkpoint({}, planned && n_past == plan_.anchor);
}

void Sequence::check_no_pending_verify() const {
    if (cache_.verify_pending()) {
        throw std::logic_error("a verify pass awaits its commit: call commit(n_keep) first");
    }
}

void Sequence::appended(const int32_t * tokens, int64_t n, const float * hidden_last) {
    cache_.append((uint32_t) n);
    tokens_.insert(tokens_.end(), tokens, tokens + n);
    last_hidden_.assign(hidden_last, hidden_last + engine_.n_embd());
}

void Sequence::began_verify(std::vector<KdaSnapshots> snapshots, const int32_t * tokens, int64_t n,
                            const float * hidden, const GraphSlot * slot) {
    cache_.begin_verify(std::move(snapshots), (uint32_t) n);
    pending_tokens_.assign(tokens, tokens + n);
    pending_hidden_.assign(hidden, hidden + n * engine_.n_embd());
    pending_slot_ = slot;
}

void Sequence::release_snapshots() {
    if (pending_slot_ != nullptr) engine_.release_snapshots(pending_slot_);
    pending_slot_ = nullptr;
}

void Sequence::draft_begin(int64_t pos0, int64_t n, bool from_trunk) {
    draft_cache_->truncate((uint32_t) pos0);  // rows after the ones written now are dropped
    draft_from_trunk_ = from_trunk && draft_from_trunk_ >= pos0 ? pos0 + n : std::min<int64_t>(draft_from_trunk_, pos0);
}

void Sequence::draft_appended(int64_t n) { draft_cache_->append((uint32_t) n); }

EvalOutput Sequence::eval(const std::vector<int32_t> & tokens, bool logits_all) {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    check_no_pending_verify();
    if (tokens.empty()) {
        throw std::invalid_argument("eval: no tokens");
    }
    engine_.check_tokens(tokens.data(), (int64_t) tokens.size());
    if (cache_.n_past() + tokens.size() > cache_.n_ctx()) {
        throw std::invalid_argument("eval: " + std::to_string(cache_.n_past() + tokens.size()) +
                                    " tokens exceed the context size n_ctx = " + std::to_string(cache_.n_ctx()));
    }
    EvalOutput out;
    out.n_tokens = (int64_t) tokens.size();
    out.n_logit_rows = logits_all ? out.n_tokens : 1;
    out.logits.resize(out.n_logit_rows * engine_.n_vocab());
    out.hidden.resize(out.n_tokens * engine_.n_embd());
    for (int64_t row0 = 0, n = 0; row0 < out.n_tokens; row0 += n) {
        n = prompt_ubatch(out.n_tokens - row0);
        engine_.run_trunk({TrunkPart{this, tokens.data() + row0, n, logits_all, false, &out, row0}});
        checkpoint_if_due();
    }
    return out;
}

void Sequence::reset() {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    release_snapshots();
    cache_.clear();
    tokens_.clear();
    pending_tokens_.clear();
    last_hidden_.clear();
    checkpoints_.clear();
    plan_ = {};
    draft_from_trunk_ = 0;
    if (draft_cache_) draft_cache_->clear();
}

std::vector<uint8_t> Sequence::save_state() const {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    check_no_pending_verify();
    SequenceState s;
    s.tokens = tokens_;
    s.trunk = cache_.rows();
    s.has_draft = draft_cache_ != nullptr;
    if (draft_cache_) s.draft = draft_cache_->rows();
    s.last_hidden = last_hidden_;
    s.draft_from_trunk = draft_from_trunk_;
    for (size_t i = 0; i < checkpoints_.size(); ++i) s.checkpoints.push_back(checkpoints_.at(i));
    return serialize(s);
}

void Sequence::load_state(const uint8_t * data, size_t size) {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    check_no_pending_verify();
    SequenceState s = deserialize(data, size);
    auto misfit = [](const std::string & why) {
        return std::invalid_argument("the saved sequence does not fit this model: " + why);
    };
    cache_.check_rows(s.trunk);
    if (s.tokens.size() != s.trunk.n_past) throw misfit("its token count differs from its trunk rows");
    engine_.check_tokens(s.tokens.data(), (int64_t) s.tokens.size());
    // a sequence that keeps no NextN rows (no NextN layer, or draft_rows off) takes a saved one's trunk and leaves
    // its NextN rows; one that keeps them needs them (without, a drafting generation could resume nothing)
    if (!s.has_draft && draft_cache_ != nullptr) {
        throw misfit("it has no NextN draft rows (saved without drafting) and this sequence drafts");
    }
    if (draft_cache_) {
        draft_cache_->check_rows(s.draft);  // drafted rows may run past the trunk's: they are rewritten
    }
    const size_t n_embd = engine_.n_embd();
    if (s.last_hidden.size() != (s.trunk.n_past > 0 ? n_embd : 0)) throw misfit("its hidden state's length");
    if (s.draft_from_trunk < 0 || s.draft_from_trunk > (int64_t) s.draft.n_past) throw misfit("its draft row count");
    uint32_t previous = 0;
    for (const Checkpoint & c : s.checkpoints) {
        if (c.n_past() <= previous || c.n_past() > s.trunk.n_past) throw misfit("its checkpoints' rows");
        if (c.trunk.bytes() != cache_.recurrent_bytes() || c.hidden.size() != n_embd ||
            (!c.logits.empty() && c.logits.size() != engine_.n_vocab())) {
            throw misfit("a checkpoint's recurrent state, hidden state or logits have another size");
        }
        previous = c.n_past();
    }
    reset();
    cache_.set_rows(s.trunk);
    if (draft_cache_) draft_cache_->set_rows(s.draft);
    tokens_ = std::move(s.tokens);
    last_hidden_ = std::move(s.last_hidden);
    draft_from_trunk_ = draft_cache_ ? s.draft_from_trunk : 0;
    for (Checkpoint & c : s.checkpoints) checkpoints_.add(std::move(c));
}

void Sequence::checkpoint(std::vector<float> logits, bool anchor) {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    check_no_pending_verify();
    if (cache_.n_past() == 0) throw std::logic_error("a checkpoint of an empty sequence");
    if (checkpoints_.max_count() == 0) return;
    checkpoints_.add(Checkpoint{cache_.save(), last_hidden_, std::move(logits), anchor});
}

int64_t Sequence::common_prefix(const std::vector<int32_t> & prompt) const {
    return std::mismatch(tokens_.begin(), tokens_.end(), prompt.begin(), prompt.end()).first - tokens_.begin();
}

int64_t Sequence::draft_rows_end() const {
    // the draft head's row c-1 is rewritten with the token after it; the rows before it must be the trunk's
    return draft_cache_ ? std::min<int64_t>(draft_from_trunk_, draft_cache_->n_past()) + 1 : INT64_MAX;
}

Sequence::ResumePoint Sequence::resume_point(const std::vector<int32_t> & prompt, bool draft_rows) const {
    const int64_t n = (int64_t) prompt.size();
    const int64_t common = common_prefix(prompt), draft_bound = draft_rows ? draft_rows_end() : INT64_MAX;
    const Checkpoint * whole = common == n && n <= draft_bound ? checkpoints_.with_logits_at(n) : nullptr;
    const int64_t bound = std::min<int64_t>({common, n - 1, draft_bound});
    const int64_t n_past = cache_.n_past();
    if (whole == nullptr && n_past >= 1 && n_past <= bound) return {n_past, nullptr, false};  // the sequence as it is
    const Checkpoint * c = whole ? whole : checkpoints_.newest_at_or_before(bound);
    return {c ? c->n_past() : 0, c, whole != nullptr};
}

int64_t Sequence::resumable(const std::vector<int32_t> & prompt, bool draft_rows) const {
    return resume_point(prompt, draft_rows).n_past;
}

int64_t Sequence::resume(const std::vector<int32_t> & prompt, bool draft_rows, std::vector<float> & hidden,
                         std::vector<float> & logits, bool * from_checkpoint) {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    check_no_pending_verify();
    logits.clear();
    if (from_checkpoint != nullptr) *from_checkpoint = false;
    const ResumePoint at = resume_point(prompt, draft_rows);
    if (at.n_past > 0 && at.checkpoint == nullptr) {  // the sequence as it is: nothing to restore
        hidden = last_hidden_;
        return at.n_past;
    }
    const Checkpoint * c = at.checkpoint;
    if (c == nullptr) {
        reset();
        hidden.clear();
        return 0;
    }
    cache_.restore(c->trunk);
    if (from_checkpoint != nullptr) *from_checkpoint = true;
    tokens_.resize(c->n_past());
    last_hidden_ = c->hidden;
    if (at.whole) logits = c->logits;
    checkpoints_.drop_after(c->n_past());
    draft_from_trunk_ = std::min<int64_t>(draft_from_trunk_, c->n_past() - 1);
    hidden = last_hidden_;
    return c->n_past();
}

void Sequence::verify(const std::vector<int32_t> & tokens, EvalOutput & out) {
    const int64_t n = (int64_t) tokens.size();
    out.n_tokens = out.n_logit_rows = n;
    out.logits.resize(n * engine_.n_vocab());
    out.hidden.resize(n * engine_.n_embd());
    engine_.run_trunk({TrunkPart{this, tokens.data(), n, true, true, &out, 0}});
}

void Sequence::commit(int64_t n_keep) {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    if (n_keep < 1 || n_keep > (int64_t) pending_tokens_.size()) {
        throw std::logic_error("commit: keep " + std::to_string(n_keep) + " of the " +
                               std::to_string(pending_tokens_.size()) + " rows of the pending verify pass");
    }
    cache_.commit((uint32_t) n_keep);
    release_snapshots();
    tokens_.insert(tokens_.end(), pending_tokens_.begin(), pending_tokens_.begin() + n_keep);
    const int64_t n_embd = engine_.n_embd();
    last_hidden_.assign(pending_hidden_.begin() + (n_keep - 1) * n_embd, pending_hidden_.begin() + n_keep * n_embd);
    pending_tokens_.clear();
}

void Sequence::draft_rows(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0,
                          const int32_t * saved_pools, int64_t saved_p0, bool from_trunk, DraftOutput & out) {
    std::lock_guard<std::recursive_mutex> lock(engine_.mutex());
    if (!draft_cache_) {
        throw std::invalid_argument(engine_.model().path + ": no NextN layer to draft with (nextn_predict_layers = 0, no -md file)");
    }
    if (n < 1 || pos0 < 0 || pos0 > draft_cache_->n_past() || pos0 + n > draft_cache_->n_ctx()) {
        throw std::invalid_argument("draft rows [" + std::to_string(pos0) + ", " + std::to_string(pos0 + n) +
                                    ") do not follow the " + std::to_string(draft_cache_->n_past()) +
                                    " rows written, or exceed n_ctx = " + std::to_string(draft_cache_->n_ctx()));
    }
    if (saved_pools && n != 1) throw std::invalid_argument("a step that reuses a selection is one row after the row that made it");
    engine_.check_tokens(next_tokens, n);
    const int64_t n_batch = engine_.params().n_batch;
    for (int64_t row0 = 0; row0 < n; row0 += n_batch) {
        const int64_t m = std::min<int64_t>(n_batch, n - row0);
        const bool last = row0 + m == n;
        engine_.run_draft({DraftPart{this, hidden + row0 * engine_.n_embd(), next_tokens + row0, m, pos0 + row0,
                                     saved_pools, saved_p0, from_trunk, last ? &out : nullptr}});
    }
}

}  // namespace glm5next
