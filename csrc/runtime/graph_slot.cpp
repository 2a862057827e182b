#include "runtime/graph_slot.h"

namespace glm5next {

void GraphSlot::clear() {
    trunk_.reset();
    draft_.reset();
    shape_ = GraphShape{};
    if (ctx_ != nullptr) ggml_free(ctx_);
    ctx_ = nullptr;
}

ggml_context * GraphSlot::begin() {
    clear();
    ctx_ = ggml_init({meta_.size(), meta_.data(), true});
    return ctx_;
}

TrunkGraph & GraphSlot::new_trunk(ggml_context ** ctx) {
    *ctx = begin();
    trunk_ = std::make_unique<TrunkGraph>();
    return *trunk_;
}

DraftGraph & GraphSlot::new_draft(ggml_context ** ctx) {
    *ctx = begin();
    draft_ = std::make_unique<DraftGraph>();
    return *draft_;
}

}  // namespace glm5next
