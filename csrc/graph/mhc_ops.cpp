#include "graph/mhc_ops.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace glm5next {

namespace {

template <typename T>
const T & at(const ggml_tensor * t, int64_t i0, int64_t i1, int64_t i2) {
    return *(const T *) ((const char *) t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2]);
}

void hc_pre_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *pre = dst->src[1];
    const int64_t n_embd = dst->ne[0], hc = x->ne[1];
    for (int64_t t = ith; t < dst->ne[1]; t += nth) {
        float * out = (float *) ((char *) dst->data + t * dst->nb[1]);
        for (int64_t i = 0; i < n_embd; ++i) out[i] = 0.0f;
        for (int64_t s = 0; s < hc; ++s) {
            const float * xs = &at<float>(x, 0, s, t);
            const float w = at<float>(pre, s, t, 0);
            for (int64_t i = 0; i < n_embd; ++i) out[i] += xs[i] * w;
        }
    }
}

void hc_post_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *residual = dst->src[1], *post = dst->src[2], *comb = dst->src[3];
    const int64_t n_embd = dst->ne[0], hc = dst->ne[1], n_rows = hc * dst->ne[2];
    for (int64_t r = ith; r < n_rows; r += nth) {  // one output row (stream d of token t) per step
        const int64_t d = r % hc, t = r / hc;
        const float * xt = &at<float>(x, 0, t, 0);
        const float p = at<float>(post, d, t, 0);
        float * out = (float *) ((char *) dst->data + d * dst->nb[1] + t * dst->nb[2]);
        for (int64_t i = 0; i < n_embd; ++i) out[i] = xt[i] * p;
        for (int64_t s = 0; s < hc; ++s) {
            const float * rs = &at<float>(residual, 0, s, t);
            const float c = at<float>(comb, d, s, t);
            for (int64_t i = 0; i < n_embd; ++i) out[i] += rs[i] * c;
        }
    }
}

void hc_gates_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const float eps = *static_cast<const float *>(userdata);
    const int64_t hc = dst->ne[0] / 2;
    const ggml_tensor *mixes = dst->src[0], *scale = dst->src[1], *base = dst->src[2];
    const float * b = (const float *) base->data;
    const float s_pre = ((const float *) scale->data)[0], s_post = ((const float *) scale->data)[1];
    for (int64_t t = ith; t < dst->ne[1]; t += nth) {
        const float * m = (const float *) ((const char *) mixes->data + t * mixes->nb[1]);
        float * out = (float *) ((char *) dst->data + t * dst->nb[1]);
        for (int64_t d = 0; d < hc; ++d) {
            out[d] = 1.0f / (1.0f + std::exp(-(m[d] * s_pre + b[d]))) + eps;
            out[hc + d] = 2.0f / (1.0f + std::exp(-(m[hc + d] * s_post + b[hc + d])));
        }
    }
}

}  // namespace

ggml_tensor * hc_gates(ggml_context * ctx, ggml_tensor * mixes, ggml_tensor * scale, ggml_tensor * base, int64_t hc,
                       const float * eps) {
    for (const ggml_tensor * t : {mixes, scale, base}) {
        if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
            throw std::invalid_argument("hc_gates: operands must be contiguous f32");
        }
    }
    if (mixes->ne[0] < 2 * hc || ggml_nelements(scale) < 2 || ggml_nelements(base) < 2 * hc) {
        throw std::invalid_argument("hc_gates: operand shapes do not fit hc = " + std::to_string(hc));
    }
    ggml_tensor * args[] = {mixes, scale, base};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, 2 * hc, mixes->ne[1], 1, 1, args, 3, hc_gates_op, GGML_N_TASKS_MAX,
                          (void *) eps);
}

ggml_tensor * hc_pre_mix(ggml_context * ctx, ggml_tensor * x, ggml_tensor * pre) {
    const int64_t n_embd = x->ne[0], hc = x->ne[1], T = x->ne[2];
    if (x->type != GGML_TYPE_F32 || pre->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || pre->ne[0] != hc ||
        pre->ne[1] != T) {
        throw std::invalid_argument("hc_pre_mix: operand types, shapes or strides do not fit");
    }
    ggml_tensor * args[] = {x, pre};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, n_embd, T, 1, 1, args, 2, hc_pre_op, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor * hc_post_mix(ggml_context * ctx, ggml_tensor * x, ggml_tensor * residual, ggml_tensor * post,
                      ggml_tensor * comb) {
    const int64_t n_embd = x->ne[0], T = x->ne[1], hc = residual->ne[1];
    for (const ggml_tensor * t : {x, residual, post, comb}) {
        if (t->type != GGML_TYPE_F32) throw std::invalid_argument("hc_post_mix: operands must be f32");
    }
    if (residual->ne[0] != n_embd || residual->ne[2] != T || post->ne[0] != hc || post->ne[1] != T ||
        comb->ne[0] != hc || comb->ne[1] != hc || comb->ne[2] != T || x->nb[0] != sizeof(float) ||
        residual->nb[0] != sizeof(float)) {
        throw std::invalid_argument("hc_post_mix: operand shapes or strides do not fit");
    }
    ggml_tensor * args[] = {x, residual, post, comb};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, n_embd, hc, T, 1, args, 4, hc_post_op, GGML_N_TASKS_MAX, nullptr);
}

}  // namespace glm5next
