#include "runtime/op_profile.h"

#include "graph/delta_rule_ops.h"
#include "graph/float_rows_ops.h"
#include "graph/q8_0_rows_ops.h"
#include "runtime/traffic.h"

#include <algorithm>
#include <set>

namespace glm5next {

std::string graph_kind(const GraphShape & shape) {
    int64_t rows = 0;
    bool prompt = false, verify = false, output = false, shared = false;
    std::set<uint64_t> sequences;
    for (const PartShape & p : shape.parts) {
        rows += p.n_rows;
        prompt = prompt || (p.n_rows > 1 && !p.snapshots);  // rows kept as they come
        verify = verify || (p.n_rows > 1 && p.snapshots);   // a token and its drafts (a 1-row round is a decode step)
        output = output || p.output;
        shared = shared || p.shared;
        sequences.insert(p.sequence);
    }
    std::string kind;
    if (shape.kind == GraphShape::kDraft) {
        kind = output ? "draft step" : "draft rows";
    } else {
        kind = prompt && verify ? "prefill + verify" : prompt ? "prefill" : verify ? "verify" : "decode";
    }
    kind += " " + std::to_string(rows) + (rows == 1 ? " row" : " rows");
    if (sequences.size() > 1) kind += " x " + std::to_string(sequences.size()) + " sequences";
    if (shared) kind += ", reused selection";
    return kind;
}

std::string op_key(const ggml_tensor * node) {
    std::string key = ggml_op_desc(node);
    if ((node->op == GGML_OP_MUL_MAT || node->op == GGML_OP_MUL_MAT_ID) && node->src[0] != nullptr) {
        key += std::string(" ") + ggml_type_name(node->src[0]->type);
        if (node->op == GGML_OP_MUL_MAT_ID && node->src[0]->ne[2] == 1) key += " row by row";
    }
    if (is_q8_0_rows(node)) key += node->src[2] != nullptr ? " q8_0 rows, experts" : " q8_0 rows";
    if (is_float_rows(node)) key += std::string(" ") + ggml_type_name(node->src[0]->type) + " rows";
    if (is_delta_rule(node)) key += " delta rule";
    return key;
}

OpTimer::OpTimer(ggml_backend_sched_t sched, GraphOpTimes & into) : sched_(sched), into_(into) {
    ++into_.runs;
    ggml_backend_sched_set_eval_callback(sched_, &OpTimer::on_eval, this);
}

OpTimer::~OpTimer() { ggml_backend_sched_set_eval_callback(sched_, nullptr, nullptr); }

bool OpTimer::on_eval(ggml_tensor * t, bool ask, void * self) {
    auto * me = static_cast<OpTimer *>(self);
    if (ask) {  // node t runs next, alone (its split's inputs are copied before this question: not timed)
        me->start_ = Clock::now();
        return true;
    }
    wait_until_computed(t);
    OpTime & o = me->into_.ops[op_key(t)];
    o.ms += std::chrono::duration<double, std::milli>(Clock::now() - me->start_).count();
    ++o.nodes;
    return true;
}

}  // namespace glm5next
