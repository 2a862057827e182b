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

namespace {

ggml_tensor * new_input(ggml_context * ctx, int64_t ne0, int64_t ne1, const char * name) {
    ggml_tensor * t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, ne1);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

}  // namespace

InputKpoolRows::InputKpoolRows(ggml_context * ctx, int64_t n_rows)
    : n_cand(new_input(ctx, 1, n_rows, "inp_kpool_n_cand")) {}

void InputKpoolRows::add_tail(ggml_context * ctx, const HParams & hp) {
    if (tail_rows || !hp.idx_select_tail || hp.idx_kpool < 2) return;
    tail_rows = new_input(ctx, hp.idx_kpool - 1, n_cand->ne[1], "inp_kpool_tail_rows");
    tail_mask = new_input(ctx, hp.idx_kpool - 1, n_cand->ne[1], "inp_kpool_tail_mask");
}

void InputKpoolRows::set_input(const KpoolParams & at) const {
    const int64_t n_rows = n_cand->ne[1];
    std::vector<float> cand(n_rows);
    for (int64_t r = 0; r < n_rows; ++r) cand[r] = (float) n_candidates(at, r);
    ggml_backend_tensor_set(n_cand, cand.data(), 0, ggml_nbytes(n_cand));
    if (tail_rows == nullptr) return;
    const int64_t width = tail_rows->ne[0];
    std::vector<float> rows(width * n_rows, 0.0f), mask(width * n_rows, kSelectMasked);
    for (int64_t r = 0; r < n_rows; ++r) {  // the incomplete pool ending at the row (selected_rows)
        const int64_t pos = at.n_past + r;
        int64_t i = 0;
        for (int64_t k = (pos + 1) / at.kpool * at.kpool; k <= pos; ++k, ++i) {
            rows[r * width + i] = (float) k;
            mask[r * width + i] = 0.0f;
        }
    }
    ggml_backend_tensor_set(tail_rows, rows.data(), 0, ggml_nbytes(tail_rows));
    ggml_backend_tensor_set(tail_mask, mask.data(), 0, ggml_nbytes(tail_mask));
}

}  // namespace glm5next
