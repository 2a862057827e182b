#include "graph/rows_operands.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace glm5next {

void check_rows_operands(const char * op, const ggml_tensor * w, const ggml_tensor * x, const ggml_tensor * ids) {
    if (x->type != GGML_TYPE_F32 || x->ne[0] != w->ne[0] || x->nb[0] != sizeof(float) || x->ne[3] != 1) {
        throw std::invalid_argument(std::string(op) + ": x must be f32 [" + std::to_string(w->ne[0]) +
                                    ", n, T] with contiguous rows, got " + ggml_type_name(x->type) + " [" +
                                    std::to_string(x->ne[0]) + ", " + std::to_string(x->ne[1]) + ", " +
                                    std::to_string(x->ne[2]) + ", " + std::to_string(x->ne[3]) + "], nb0 " +
                                    std::to_string(x->nb[0]));
    }
    if (ids == nullptr && w->ne[2] != 1) {
        throw std::invalid_argument(std::string(op) + ": several matrices need ids to route the rows");
    }
    if (ids != nullptr && (ids->type != GGML_TYPE_I32 || ids->ne[1] != x->ne[2] || ids->ne[2] != 1 || ids->ne[3] != 1 ||
                           ids->ne[0] % x->ne[1] != 0)) {  // ggml_mul_mat_id's conditions
        throw std::invalid_argument(std::string(op) + ": ids must be i32 [n_used, " + std::to_string(x->ne[2]) +
                                    "] with n_used a multiple of x's " + std::to_string(x->ne[1]) + " rows per token");
    }
}

RowsOperands RowsOperands::of(const ggml_tensor * dst) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *ids = dst->src[2];
    return {(const char *) w->data, w->nb[1], w->nb[2], w->ne[0], w->ne[1], w->ne[2],
            (const char *) x->data, x->nb[1], x->nb[2], x->ne[1],
            ids ? (const char *) ids->data : nullptr, ids ? ids->nb[0] : 0, ids ? ids->nb[1] : 0,
            (char *) dst->data, dst->nb[1], dst->nb[2], dst->ne[1], dst->ne[2]};
}

ggml_tensor * rows_op_node(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids, ggml_custom_op_t op,
                           const char * name) {
    ggml_tensor * args[] = {w, x, ids};
    ggml_tensor * out = ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], ids ? ids->ne[0] : x->ne[1], x->ne[2], 1, args,
                                       ids ? 3 : 2, op, GGML_N_TASKS_MAX, nullptr);
    ggml_set_name(out, name);
    return out;
}

void route_columns(const RowsOperands & o, RowsColumns & cols) {
    cols.resize(std::max<size_t>(cols.size(), (size_t) o.n_mat));
    for (int64_t e = 0; e < o.n_mat; ++e) cols[e].clear();
    for (int64_t t = 0; t < o.T; ++t) {
        for (int64_t j = 0; j < o.n_used; ++j) {
            const int64_t e = o.ids ? *(const int32_t *) (o.ids + j * o.ids_nb0 + t * o.ids_nb1) : 0;
            GGML_ASSERT(e >= 0 && e < o.n_mat);  // the router's ids (ggml_mul_mat_id asserts the same)
            cols[e].push_back({j, t});
        }
    }
}

std::vector<float> check_rows(std::mt19937 & rng, int64_t n, int64_t K) {
    std::normal_distribution<float> normal;
    std::vector<float> v(n * K);
    for (int64_t i = 0; i < n * K; ++i) v[i] = normal(rng) * (1.0f + (float) (i / K) * 3.0f);
    return v;
}

}  // namespace glm5next
