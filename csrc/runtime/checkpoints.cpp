#include "runtime/checkpoints.h"

namespace glm5next {

void Checkpoints::add(Checkpoint c) {
    if (max_count_ == 0) return;
    drop_after((int64_t) c.n_past() - 1);
    if (c.anchor) {
        for (Checkpoint & o : list_) o.anchor = false;
    }
    list_.push_back(std::move(c));
    while (list_.size() > max_count_) {
        // the oldest, unless it is the anchor and another (not the one just added) can go
        auto victim = list_.begin();
        if (victim->anchor && list_.size() > 2) ++victim;
        list_.erase(victim);
    }
}

const Checkpoint * Checkpoints::newest_at_or_before(int64_t max_row) const {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) {
        if (it->n_past() >= 1 && (int64_t) it->n_past() <= max_row) return &*it;
    }
    return nullptr;
}

const Checkpoint * Checkpoints::with_logits_at(int64_t row) const {
    for (const Checkpoint & c : list_) {
        if ((int64_t) c.n_past() == row && !c.logits.empty()) return &c;
    }
    return nullptr;
}

void Checkpoints::drop_after(int64_t row) {
    while (!list_.empty() && (int64_t) list_.back().n_past() > row) list_.pop_back();
}

size_t Checkpoints::bytes() const {
    size_t n = 0;
    for (const Checkpoint & c : list_) n += c.bytes();
    return n;
}

}  // namespace glm5next
