#include "runtime/traffic.h"

#include <algorithm>
#include <iterator>
#include <set>

namespace glm5next {

GraphSources graph_sources(ggml_cgraph * gf) {
    GraphSources out;
    out.reserve(ggml_graph_n_nodes(gf));
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        out.emplace_back(node, std::array<ggml_tensor *, GGML_MAX_SRC>{});
        std::copy(std::begin(node->src), std::end(node->src), out.back().second.begin());
    }
    return out;
}

size_t bytes_copied(ggml_backend_sched_t sched, const GraphSources & sources) {
    std::set<std::pair<const ggml_tensor *, ggml_backend_t>> copies;
    size_t bytes = 0;
    for (const auto & [node, srcs] : sources) {
        ggml_backend_t at = ggml_backend_sched_get_tensor_backend(sched, node);
        for (ggml_tensor * src : srcs) {
            if (src == nullptr || at == nullptr) continue;
            ggml_backend_t from = ggml_backend_sched_get_tensor_backend(sched, src);
            if (from != nullptr && from != at && copies.emplace(src, at).second) bytes += ggml_nbytes(src);
        }
    }
    return bytes;
}

void wait_until_computed(const ggml_tensor * t) {
    if (t->buffer != nullptr && ggml_nbytes(t) > 0) {
        char byte;
        ggml_backend_tensor_get(t, &byte, 0, 1);
    }
}

CopyTimer::CopyTimer(ggml_backend_sched_t sched) : sched_(sched), last_(Clock::now()) {
    ggml_backend_sched_set_eval_callback(sched_, &CopyTimer::on_eval, this);
}

CopyTimer::~CopyTimer() { ggml_backend_sched_set_eval_callback(sched_, nullptr, nullptr); }

bool CopyTimer::on_eval(ggml_tensor * t, bool ask, void * self) {
    auto * me = static_cast<CopyTimer *>(self);
    const Clock::time_point now = Clock::now();
    if (!ask) {  // node t computed (its compute is not the next split's copy time)
        wait_until_computed(t);
        me->last_ = Clock::now();
        return true;
    }
    ggml_backend_t at = ggml_backend_sched_get_tensor_backend(me->sched_, t);
    if (at != me->current_) {  // the first node of a split: its inputs were copied since the last node
        me->copy_seconds_ += std::chrono::duration<double>(now - me->last_).count();
        me->current_ = at;
    }
    return true;  // ask for every node: then each split's first node is seen right after its copies
}

}  // namespace glm5next
