#include "runtime/checkpoint_plan.h"

#include <algorithm>

#include "model/vocab.h"

namespace glm5next {

CheckpointPlan plan_checkpoints(const std::vector<int32_t> & prompt, int64_t from, const Vocab & vocab) {
    const int64_t n = (int64_t) prompt.size();
    int64_t last_start = -1, last_user = -1;
    for (int64_t i = n - 1; i >= 1 && (last_start < 0 || last_user < 0); --i) {
        const int32_t t = prompt[i];
        if (last_user < 0 && t == vocab.user_start) last_user = i;
        if (last_start < 0 && std::binary_search(vocab.message_starts.begin(), vocab.message_starts.end(), t)) {
            last_start = i;
        }
    }
    CheckpointPlan plan;
    std::vector<int64_t> rows = {last_start, last_user};
    if (last_start < 0 || n - last_start > 2 * kTailRows) rows.push_back(n - kTailRows);
    for (int64_t r : rows) {
        if (r > from && r >= 1 && r < n) plan.rows.push_back(r);
    }
    std::sort(plan.rows.begin(), plan.rows.end());
    plan.rows.erase(std::unique(plan.rows.begin(), plan.rows.end()), plan.rows.end());
    if (last_user > from && last_user >= 1) plan.anchor = last_user;
    return plan;
}

}  // namespace glm5next
