#include "graph/inputs.h"

#include <algorithm>
#include <vector>

#include "ggml-backend.h"

namespace glm5next {

namespace {

// A graph input of `type` [ne0, ne1] named `name`.
ggml_tensor * new_input(ggml_context * ctx, ggml_type type, int64_t ne0, int64_t ne1, const char * name) {
    ggml_tensor * t = ggml_new_tensor_2d(ctx, type, ne0, ne1);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

}  // namespace

InputArray::InputArray(ggml_context * ctx, ggml_type type, int64_t ne0, int64_t ne1, const char * name)
    : t(new_input(ctx, type, ne0, ne1, name)) {}

void InputArray::set_input(const void * data) const { ggml_backend_tensor_set(t, data, 0, ggml_nbytes(t)); }

InputRowScale::InputRowScale(ggml_context * ctx, const HParams & hp, int64_t n_rows) {
    if (hp.idx_select_tail) return;  // every row selects its own tail pool
    t = new_input(ctx, GGML_TYPE_F32, 1, n_rows, "inp_row_scale");
}

void InputRowScale::set_input(const KpoolParams & at, int64_t row0, int64_t n) const {
    if (t == nullptr) return;
    std::vector<float> scale(n);
    for (int64_t r = 0; r < n; ++r) scale[r] = row_has_keys(at, r) ? 1.0f : 0.0f;
    ggml_backend_tensor_set(t, scale.data(), row0 * t->nb[1], n * sizeof(float));
}

InputKpoolRows::InputKpoolRows(ggml_context * ctx, int64_t n_rows)
    : n_cand(new_input(ctx, GGML_TYPE_F32, 1, n_rows, "inp_kpool_n_cand")) {}

void InputKpoolRows::add_tail(ggml_context * ctx, const HParams & hp) {
    if (tail_rows || !hp.idx_select_tail || hp.idx_kpool < 2) return;
    tail_rows = new_input(ctx, GGML_TYPE_F32, hp.idx_kpool - 1, n_cand->ne[1], "inp_kpool_tail_rows");
    tail_mask = new_input(ctx, GGML_TYPE_F32, hp.idx_kpool - 1, n_cand->ne[1], "inp_kpool_tail_mask");
}

void InputKpoolRows::set_input(const KpoolParams & at, int64_t row0, int64_t n) const {
    const int64_t n_rows = n < 0 ? n_cand->ne[1] : n;
    std::vector<float> cand(n_rows);
    for (int64_t r = 0; r < n_rows; ++r) cand[r] = (float) n_candidates(at, r);
    ggml_backend_tensor_set(n_cand, cand.data(), row0 * sizeof(float), n_rows * sizeof(float));
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
    const size_t at_row = row0 * width * sizeof(float), bytes = rows.size() * sizeof(float);
    ggml_backend_tensor_set(tail_rows, rows.data(), at_row, bytes);
    ggml_backend_tensor_set(tail_mask, mask.data(), at_row, bytes);
}

InputCacheRows::InputCacheRows(ggml_context * ctx, int64_t n_rows)
    : pos(new_input(ctx, GGML_TYPE_I64, n_rows, 1, "inp_pos")) {}

void InputCacheRows::add_pools(ggml_context * ctx, int64_t kpool, int64_t n_pooled, int64_t n_ctx) {
    if (pool_rows) return;
    kpool_ = kpool;
    n_pooled_ = n_pooled;
    n_ctx_ = n_ctx;
    const int64_t n_slots = max_pools_touched(pos->ne[0], kpool);
    pool_rows = new_input(ctx, GGML_TYPE_I32, kpool * n_slots, 1, "inp_pool_rows");
    pool_dst = new_input(ctx, GGML_TYPE_I64, n_slots, 1, "inp_pool_dst");
}

void pool_slots(int64_t n_past, int64_t n_rows, int64_t n_slots, int64_t kpool, int64_t n_pooled, int64_t n_ctx,
                int64_t * dst, int32_t * rows) {
    const int64_t first = n_past / kpool, last = (n_past + n_rows - 1) / kpool;
    for (int64_t i = 0; i < n_slots; ++i) {
        dst[i] = std::min({first + i, last, n_pooled - 1});
        for (int64_t r = 0; r < kpool; ++r) rows[i * kpool + r] = (int32_t) std::min(dst[i] * kpool + r, n_ctx - 1);
    }
}

void InputCacheRows::set_input(int64_t n_past) const {
    const int64_t n_rows = pos->ne[0];
    std::vector<int64_t> p(n_rows);
    for (int64_t i = 0; i < n_rows; ++i) p[i] = n_past + i;
    ggml_backend_tensor_set(pos, p.data(), 0, ggml_nbytes(pos));
    if (pool_rows == nullptr) return;
    const int64_t n_slots = pool_dst->ne[0];
    std::vector<int64_t> dst(n_slots);
    std::vector<int32_t> rows(kpool_ * n_slots);
    pool_slots(n_past, n_rows, n_slots, kpool_, n_pooled_, n_ctx_, dst.data(), rows.data());
    ggml_backend_tensor_set(pool_rows, rows.data(), 0, ggml_nbytes(pool_rows));
    ggml_backend_tensor_set(pool_dst, dst.data(), 0, ggml_nbytes(pool_dst));
}

ggml_tensor * InputCells::add_cells(ggml_context * ctx) {
    if (!cells) cells = new_input(ctx, GGML_TYPE_I32, (int64_t) parts_.size(), 1, "inp_cells");
    return cells;
}

ggml_tensor * InputCells::add_rows(ggml_context * ctx) {
    if (rows) return rows;
    int64_t n_rows = 0;
    for (const CellPart & p : parts_) n_rows += p.n_rows;
    rows = new_input(ctx, GGML_TYPE_I64, n_rows, 1, "inp_cell_rows");
    return rows;
}

void InputCells::add_pools(ggml_context * ctx, int64_t kpool) {
    if (pool_rows) return;
    kpool_ = kpool;
    int64_t n_slots = 0;
    for (const CellPart & p : parts_) n_slots += max_pools_touched(p.n_rows, kpool);
    pool_rows = new_input(ctx, GGML_TYPE_I32, kpool * n_slots, 1, "inp_cell_pool_rows");
    pool_dst = new_input(ctx, GGML_TYPE_I64, n_slots, 1, "inp_cell_pool_dst");
}

void InputCells::set_input(const std::vector<int64_t> & n_past) const {
    std::vector<int32_t> cell_of;
    std::vector<int64_t> row_of, dst;
    std::vector<int32_t> pool_row_of;
    for (size_t i_part = 0; i_part < parts_.size(); ++i_part) {
        const CellPart & p = parts_[i_part];
        cell_of.push_back(p.cell);
        for (int64_t i = 0; i < p.n_rows; ++i) row_of.push_back(p.cell * p.n_ctx + n_past.at(i_part) + i);
        if (pool_rows == nullptr) continue;
        const int64_t n_slots = max_pools_touched(p.n_rows, kpool_), at = (int64_t) dst.size();
        dst.resize(at + n_slots);
        pool_row_of.resize((at + n_slots) * kpool_);
        pool_slots(n_past.at(i_part), p.n_rows, n_slots, kpool_, p.n_pooled, p.n_ctx, dst.data() + at,
                   pool_row_of.data() + at * kpool_);
        for (int64_t i = at; i < at + n_slots; ++i) dst[i] += p.cell * p.n_pooled;
        for (int64_t i = at * kpool_; i < (at + n_slots) * kpool_; ++i) pool_row_of[i] += (int32_t) (p.cell * p.n_ctx);
    }
    if (cells) ggml_backend_tensor_set(cells, cell_of.data(), 0, ggml_nbytes(cells));
    if (rows) ggml_backend_tensor_set(rows, row_of.data(), 0, ggml_nbytes(rows));
    if (pool_rows) {
        ggml_backend_tensor_set(pool_rows, pool_row_of.data(), 0, ggml_nbytes(pool_rows));
        ggml_backend_tensor_set(pool_dst, dst.data(), 0, ggml_nbytes(pool_dst));
    }
}

}  // namespace glm5next
