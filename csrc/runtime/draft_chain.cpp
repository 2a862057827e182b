#include "runtime/draft_chain.h"

#include <stdexcept>

namespace glm5next {

DraftChain::DraftChain(Sequence & seq, bool share) : seq_(seq), share_(share) {
    if (!seq.has_draft_head()) {
        throw std::invalid_argument("draft-mtp needs the NextN layer, which this file lacks (nextn_predict_layers = 0)");
    }
}

const DraftOutput & DraftChain::begin(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0) {
    seq_.draft_rows(hidden, next_tokens, n, pos0, nullptr, -1, /*from_trunk=*/true, out_);
    p0_ = pos0 + n - 1;
    began();
    return out_;
}

DraftPart DraftChain::begin_part(const float * hidden, const int32_t * next_tokens, int64_t n, int64_t pos0) {
    p0_ = pos0 + n - 1;
    step_ = -1;
    return DraftPart{&seq_, hidden, next_tokens, n, pos0, nullptr, -1, /*from_trunk=*/true, &out_};
}

void DraftChain::began() {
    step_ = 0;
    saved_pools_ = out_.pools;
}

const DraftOutput & DraftChain::next(int32_t drafted) {
    seq_.engine().run_draft({next_part(drafted)});
    stepped();
    return out_;
}

DraftPart DraftChain::next_part(int32_t drafted) {
    if (step_ < 0) throw std::logic_error("DraftChain::next before begin");
    drafted_ = drafted;
    // The row (z_{k-1}, d_k) at p0 + k, k = step_ + 1: z is read from out_ before the step overwrites it
    // (Engine::run_draft copies it).
    return DraftPart{&seq_, out_.z.data(), &drafted_, 1, p0_ + step_ + 1, share_ ? saved_pools_.data() : nullptr,
                     share_ ? p0_ : -1, /*from_trunk=*/false, &out_};
}

}  // namespace glm5next
