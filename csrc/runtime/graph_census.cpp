#include "runtime/graph_census.h"

#include "graph/float_rows_ops.h"
#include "graph/q8_0_rows_ops.h"
#include "model/kernel_limits.h"

namespace glm5next {

// ggml-cuda's ggml_cuda_is_view_or_noop: the nodes no kernel runs for.
static bool is_view_or_noop(const ggml_tensor * t) {
    return ggml_is_empty(t) || t->op == GGML_OP_RESHAPE || t->op == GGML_OP_TRANSPOSE || t->op == GGML_OP_VIEW ||
           t->op == GGML_OP_PERMUTE || t->op == GGML_OP_NONE;
}

GraphCensus take_census(ggml_backend_sched_t sched, ggml_cgraph * gf, int cuda_cc) {
    GraphCensus c;
    c.n_splits = ggml_backend_sched_get_n_splits(sched);
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        const ggml_tensor * node = ggml_graph_node(gf, i);
        if (is_view_or_noop(node)) continue;
        ++c.nodes;
        ggml_backend_t backend = ggml_backend_sched_get_tensor_backend(sched, const_cast<ggml_tensor *>(node));
        ggml_backend_dev_t dev = backend != nullptr ? ggml_backend_get_device(backend) : nullptr;
        ++c.by_device[dev != nullptr ? ggml_backend_dev_name(dev) : "?"];
        const bool id = node->op == GGML_OP_MUL_MAT_ID;
        if (id || node->op == GGML_OP_MUL_MAT || is_q8_0_rows(node) || is_float_rows(node)) ++c.products;
        if (id && node->src[0]->ne[2] == 1) ++c.one_matrix_id;
        if (id && dev != nullptr && kernel_backend(dev) == "CUDA" && cuda_mul_mat_id_needs_sync(node, cuda_cc)) {
            ++c.cuda_graph_blockers;
        }
    }
    return c;
}

bool reads_device_memory(const ggml_tensor * t) {
    const ggml_tensor * data = t->view_src != nullptr ? t->view_src : t;
    return data->buffer != nullptr && !ggml_backend_buffer_is_host(data->buffer);
}

}  // namespace glm5next
