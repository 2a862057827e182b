#include "graph/norm_ops.h"

#include <stdexcept>
#include <string>

#include "graph/cpu_arch.h"

#if GLM5NEXT_X86_KERNELS
#include <immintrin.h>
#endif

namespace glm5next {

namespace {

// Each square rounded to f32, summed in f64 (ggml's rms_norm: sum += (ggml_float)(x[i] * x[i])).
double sum_squares_scalar(const float * x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += (double) (x[i] * x[i]);
    return s;
}

#if GLM5NEXT_X86_KERNELS
// The same f32 squares summed over 4 x 4 f64 lanes, the lanes added, then the last n % 16 values in order.
__attribute__((target("avx2"))) double sum_squares_avx2(const float * x, int64_t n) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 2; ++j) {
            const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
            const __m256 sq = _mm256_mul_ps(v, v);
            acc[2 * j] = _mm256_add_pd(acc[2 * j], _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
            acc[2 * j + 1] = _mm256_add_pd(acc[2 * j + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
        }
    }
    const __m256d s4 = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2))) + sum_squares_scalar(x + i, n - i);
}
#endif

double sum_squares(const float * x, int64_t n) {
#if GLM5NEXT_X86_KERNELS
    static const bool avx2 = cpu_has_avx2_fma_f16c();
    if (avx2) return sum_squares_avx2(x, n);
#endif
    return sum_squares_scalar(x, n);
}

// y = x * scale, then * w[i] where w, then * after where after != 1 (each product rounded to f32, as ggml's ops).
// Plain loops: the compiler vectorizes them (no sums, no reordering).
void scale_row(const float * x, float scale, const float * w, float after, float * y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
    if (w) {
        for (int64_t i = 0; i < n; ++i) y[i] *= w[i];
    }
    if (after != 1.0f) {
        for (int64_t i = 0; i < n; ++i) y[i] *= after;
    }
}

// This thread's share of the rows. userdata: RMSNorm's eps, or nullptr for L2 (its eps and scale from n0).
void norm_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor * x = dst->src[0];
    const float * w = dst->src[1] ? (const float *) dst->src[1]->data : nullptr;
    const int64_t n0 = x->ne[0], ne1 = x->ne[1], ne2 = x->ne[2], rows = ne1 * ne2 * x->ne[3];
    const float eps = userdata ? *(const float *) userdata : l2_norm_eps(n0);
    const float after = userdata ? 1.0f : l2_norm_scale(n0);
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t i1 = r % ne1, i2 = r / ne1 % ne2, i3 = r / (ne1 * ne2);
        const float * xr = (const float *) ((const char *) x->data + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]);
        const float mean = sum_squares(xr, n0) / n0;
        scale_row(xr, 1.0f / std::sqrt(mean + eps), w, after, (float *) dst->data + r * n0, n0);
    }
}

void check_x(const char * op, const ggml_tensor * x) {
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float)) {
        throw std::invalid_argument(std::string(op) + ": x is " + ggml_type_name(x->type) +
                                    (x->type == GGML_TYPE_F32 ? " with rows that are not contiguous" : ", not f32"));
    }
}

}  // namespace

ggml_tensor * rms_norm_f32(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, const float * eps) {
    check_x("rms_norm_f32", x);
    if (eps == nullptr) throw std::invalid_argument("rms_norm_f32: no eps");
    if (w != nullptr && (w->type != GGML_TYPE_F32 || !ggml_is_contiguous(w) || ggml_nelements(w) != x->ne[0])) {
        throw std::invalid_argument("rms_norm_f32: w (" + std::string(ggml_type_name(w->type)) + ", " +
                                    std::to_string(ggml_nelements(w)) + " values) is not contiguous f32 of x's row size " +
                                    std::to_string(x->ne[0]));
    }
    ggml_tensor * args[] = {x, w};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args, w ? 2 : 1, norm_op,
                          GGML_N_TASKS_MAX, (void *) eps);
}

ggml_tensor * l2_norm_f32(ggml_context * ctx, ggml_tensor * x) {
    check_x("l2_norm_f32", x);
    ggml_tensor * args[] = {x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args, 1, norm_op,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace glm5next
