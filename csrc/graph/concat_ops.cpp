#include "graph/concat_ops.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace glm5next {

namespace {

// The op's `dim`, as userdata that outlives every graph.
constexpr int kDims[4] = {0, 1, 2, 3};
// The most pieces one node joins: ggml_custom_4d takes fewer than GGML_MAX_SRC arguments.
constexpr size_t kMaxPieces = GGML_MAX_SRC - 1;

// n values of row (i1, i2, i3) of t into y.
void copy_row(const ggml_tensor * t, int64_t i1, int64_t i2, int64_t i3, int64_t n, float * y) {
    const char * x = (const char *) t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
    if (t->nb[0] == sizeof(float) && n > 8) {
        std::memcpy(y, x, n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; ++i) y[i] = *(const float *) (x + i * t->nb[0]);
}

// f(i1, i2, i3, y) for each of this thread's share of dst's rows (y: the row's values), the row's indices stepped
// from the first (rows of a few values are many, KDA's conv windows of 3 values one per channel and sequence: three
// divisions per row cost more than its copy).
template <typename F>
void for_rows(ggml_tensor * dst, int ith, int nth, F f) {
    const int64_t ne1 = dst->ne[1], ne2 = dst->ne[2], rows = ne1 * ne2 * dst->ne[3];
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    int64_t i1 = r0 % ne1, i2 = r0 / ne1 % ne2, i3 = r0 / (ne1 * ne2);
    for (int64_t r = r0; r < r1; ++r) {
        f(i1, i2, i3, (float *) ((char *) dst->data + i1 * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3]));
        if (++i1 == ne1) {
            i1 = 0;
            if (++i2 == ne2) {
                i2 = 0;
                ++i3;
            }
        }
    }
}

// Each row from the piece that holds it (from every piece along dim 0).
void concat_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const int dim = *(const int *) userdata;
    int n_pieces = 0;
    while (n_pieces < GGML_MAX_SRC && dst->src[n_pieces] != nullptr) ++n_pieces;
    for_rows(dst, ith, nth, [&](int64_t i1, int64_t i2, int64_t i3, float * y) {
        if (dim == 0) {
            for (int p = 0; p < n_pieces; ++p) {
                copy_row(dst->src[p], i1, i2, i3, dst->src[p]->ne[0], y);
                y += dst->src[p]->ne[0];
            }
            return;
        }
        int64_t i[4] = {0, i1, i2, i3};
        int p = 0;
        while (i[dim] >= dst->src[p]->ne[dim]) i[dim] -= dst->src[p++]->ne[dim];
        copy_row(dst->src[p], i[1], i[2], i[3], dst->ne[0], y);
    });
}

}  // namespace

ggml_tensor * concat_f32(ggml_context * ctx, const std::vector<ggml_tensor *> & pieces, int dim) {
    if (pieces.empty()) throw std::invalid_argument("concat_f32: no pieces");
    if (dim < 0 || dim > 3) throw std::invalid_argument("concat_f32: dim " + std::to_string(dim) + " is not 0..3");
    if (pieces.size() == 1) return pieces[0];
    if (pieces.size() > kMaxPieces) {  // the first kMaxPieces joined, then the rest after them
        std::vector<ggml_tensor *> rest = {concat_f32(ctx, {pieces.begin(), pieces.begin() + kMaxPieces}, dim)};
        rest.insert(rest.end(), pieces.begin() + kMaxPieces, pieces.end());
        return concat_f32(ctx, rest, dim);
    }
    int64_t ne[4] = {pieces[0]->ne[0], pieces[0]->ne[1], pieces[0]->ne[2], pieces[0]->ne[3]};
    for (size_t p = 0; p < pieces.size(); ++p) {
        const ggml_tensor * t = pieces[p];
        if (t->type != GGML_TYPE_F32) {
            throw std::invalid_argument("concat_f32: piece " + std::to_string(p) + " is " + ggml_type_name(t->type) +
                                        ", not f32");
        }
        for (int d = 0; d < 4; ++d) {
            if (d != dim && t->ne[d] != ne[d]) {
                throw std::invalid_argument("concat_f32: piece " + std::to_string(p) + " has " + std::to_string(t->ne[d]) +
                                            " in dimension " + std::to_string(d) + ", piece 0 " + std::to_string(ne[d]));
            }
        }
        if (p > 0) ne[dim] += t->ne[dim];
    }
    std::vector<ggml_tensor *> args(pieces);
    return ggml_custom_4d(ctx, GGML_TYPE_F32, ne[0], ne[1], ne[2], ne[3], args.data(), (int) args.size(), concat_op,
                          GGML_N_TASKS_MAX, (void *) &kDims[dim]);
}

}  // namespace glm5next
