#include "graph/indexer_ops.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace glm5next {

namespace {

void indexer_scores_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor *kq = dst->src[0], *w = dst->src[1];
    const float scale = *(const float *) userdata;
    const int64_t n_pool = kq->ne[0], n_head = kq->ne[2];
    for (int64_t t = ith; t < dst->ne[1]; t += nth) {
        float * out = (float *) ((char *) dst->data + t * dst->nb[1]);
        std::fill(out, out + n_pool, 0.0f);
        for (int64_t h = 0; h < n_head; ++h) {
            const float * row = (const float *) ((const char *) kq->data + t * kq->nb[1] + h * kq->nb[2]);
            const float wt = *(const float *) ((const char *) w->data + h * w->nb[0] + t * w->nb[1]);
            for (int64_t p = 0; p < n_pool; ++p) out[p] += std::max(row[p] * scale, 0.0f) * wt;
        }
    }
}

}  // namespace

ggml_tensor * indexer_scores(ggml_context * ctx, ggml_tensor * kq, ggml_tensor * w, const float * scale) {
    if (kq->type != GGML_TYPE_F32 || w->type != GGML_TYPE_F32 || !ggml_is_contiguous(kq)) {
        throw std::invalid_argument("indexer_scores: kq must be contiguous f32 and w f32");
    }
    if (w->ne[0] != kq->ne[2] || w->ne[1] != kq->ne[1]) {
        throw std::invalid_argument("indexer_scores: w [" + std::to_string(w->ne[0]) + ", " + std::to_string(w->ne[1]) +
                                    "] does not fit kq's " + std::to_string(kq->ne[2]) + " heads and " +
                                    std::to_string(kq->ne[1]) + " rows");
    }
    ggml_tensor * args[] = {kq, w};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, kq->ne[0], kq->ne[1], 1, 1, args, 2, indexer_scores_op, GGML_N_TASKS_MAX,
                          (void *) scale);
}

}  // namespace glm5next
