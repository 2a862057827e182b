#include "graph/inputs.h"

#include <vector>

#include "ggml-backend.h"

namespace glm5next {

InputTokens::InputTokens(ggml_context * ctx, int64_t n_rows) : t(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_rows)) {
    ggml_set_name(t, "inp_tokens");
    ggml_set_input(t);
}

void InputTokens::set_input(const int32_t * ids) const { ggml_backend_tensor_set(t, ids, 0, ggml_nbytes(t)); }

InputHidden::InputHidden(ggml_context * ctx, int64_t n_embd, int64_t n_rows)
    : t(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd, n_rows)) {
    ggml_set_name(t, "inp_hidden");
    ggml_set_input(t);
}

void InputHidden::set_input(const float * rows) const { ggml_backend_tensor_set(t, rows, 0, ggml_nbytes(t)); }

InputSavedPools::InputSavedPools(ggml_context * ctx, int64_t n_top_pool)
    : t(ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_top_pool, 1)) {
    ggml_set_name(t, "inp_saved_pools");
    ggml_set_input(t);
}

void InputSavedPools::set_input(const int32_t * pools) const { ggml_backend_tensor_set(t, pools, 0, ggml_nbytes(t)); }

InputRowScale::InputRowScale(ggml_context * ctx, const HParams & hp, int64_t n_rows) {
    if (hp.idx_select_tail) return;  // every row selects its own tail pool
    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, n_rows);
    ggml_set_name(t, "inp_row_scale");
    ggml_set_input(t);
}

void InputRowScale::set_input(const KpoolParams & at) const {
    if (t == nullptr) return;
    std::vector<float> scale(t->ne[1]);
    for (int64_t r = 0; r < t->ne[1]; ++r) scale[r] = row_has_keys(at, r) ? 1.0f : 0.0f;
    ggml_backend_tensor_set(t, scale.data(), 0, ggml_nbytes(t));
}

}  // namespace glm5next
