#include "graph/inputs.h"

#include <vector>

#include "ggml-backend.h"

namespace glm5next {

InputArray::InputArray(ggml_context * ctx, ggml_type type, int64_t ne0, int64_t ne1, const char * name)
    : t(ggml_new_tensor_2d(ctx, type, ne0, ne1)) {
    ggml_set_name(t, name);
    ggml_set_input(t);
}

void InputArray::set_input(const void * data) const { ggml_backend_tensor_set(t, data, 0, ggml_nbytes(t)); }

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
