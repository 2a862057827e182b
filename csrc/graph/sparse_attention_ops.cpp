#include "graph/sparse_attention_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "graph/cpu_arch.h"

namespace glm5next {

namespace {

// Dot product with 16 independent partial sums, which the compiler turns into vector registers.
inline float dot(const float * a, const float * b, int64_t n) {
    float acc[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
    }
    float s = 0.0f;
    for (int j = 0; j < 16; ++j) s += acc[j];
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// On x86-64 one clone per instruction set, chosen at load time: the project is built for any x86-64, ggml for
// this CPU (graph/cpu_arch.h).
// Work items are (row, group of heads): a decode row (T = 1) gives each thread heads of its own (by rows alone, one
// thread did all of it while the others waited; 13-15% of a decode step at -t 1 on the bundled model and the bench
// preset, perf). Each head's arithmetic is the same whatever the split: the output does not depend on -t.
#if GLM5NEXT_X86_KERNELS
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void sparse_attention_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor *q = dst->src[0], *latent = dst->src[1], *rows = dst->src[2], *mask = dst->src[3];
    const float scale = *(const float *) userdata;
    const int64_t kvr = q->ne[0], T = q->ne[1], nh = q->ne[2], n_sel = rows->ne[0];
    const int64_t groups = std::clamp<int64_t>(nth / std::max<int64_t>(T, 1), 1, nh);  // head groups per row
    const int64_t per_group = (nh + groups - 1) / groups;
    // an f16 / bf16 cache's rows are widened once per row t and work item, into kf, with ggml-cpu's vectorized
    // converters (ggml's type traits convert one value at a time: on the bench preset's 8 heads that made a decode
    // step at depth 4096 slower with f16 rows than with f32); an f32 cache's rows are read in place
    void (*widen)(const void *, float *, int64_t) = nullptr;
    if (latent->type == GGML_TYPE_F16) {
        widen = [](const void * x, float * y, int64_t n) { ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) x, y, n); };
    } else if (latent->type == GGML_TYPE_BF16) {
        widen = [](const void * x, float * y, int64_t n) { ggml_cpu_bf16_to_fp32((const ggml_bf16_t *) x, y, n); };
    } else if (latent->type != GGML_TYPE_F32) {
        widen = ggml_get_type_traits(latent->type)->to_float;  // q8_0 / q4_0: dequantized
    }
    thread_local std::vector<float> a;  // scratch kept by ggml's worker threads: no allocation per token
    thread_local std::vector<int32_t> used;
    thread_local std::vector<float> kf;
    a.resize(nh * n_sel);
    used.resize(n_sel);
    if (widen != nullptr) kf.resize(n_sel * kvr);
    for (int64_t w = ith; w < T * groups; w += nth) {
        const int64_t t = w / groups, h0 = (w % groups) * per_group, h1 = std::min(nh, h0 + per_group);
        const int32_t * r = (const int32_t *) ((const char *) rows->data + t * rows->nb[1]);
        const float * m = (const float *) ((const char *) mask->data + t * mask->nb[3]);
        int64_t n_used = 0;
        for (int64_t s = 0; s < n_sel; ++s) {
            if (m[s] != -std::numeric_limits<float>::infinity()) used[n_used++] = (int32_t) s;
        }
        for (int64_t h = h0; h < h1; ++h) {
            float * out = (float *) ((char *) dst->data + h * dst->nb[2] + t * dst->nb[3]);
            std::fill(out, out + kvr, 0.0f);
        }
        if (n_used == 0) continue;  // kpool_rows_mask always leaves one slot; zeros, as the caller's row_scale gives
        auto key = [&](int64_t i) {  // the latent row of used slot i, f32
            const char * row = (const char *) latent->data + r[used[i]] * latent->nb[1];
            return widen == nullptr ? (const float *) row : kf.data() + i * kvr;
        };
        if (widen != nullptr) {
            for (int64_t i = 0; i < n_used; ++i) {
                widen((const char *) latent->data + r[used[i]] * latent->nb[1], kf.data() + i * kvr, kvr);
            }
        }
        for (int64_t i = 0; i < n_used; ++i) {  // scores, the group's heads per latent row
            const int64_t s = used[i];
            const float * k = key(i);
            for (int64_t h = h0; h < h1; ++h) {
                const float * qh = (const float *) ((const char *) q->data + t * q->nb[1] + h * q->nb[2]);
                a[h * n_sel + i] = dot(qh, k, kvr) * scale + m[s];
            }
        }
        for (int64_t h = h0; h < h1; ++h) {  // softmax over the used slots
            float * ah = a.data() + h * n_sel;
            const float mx = *std::max_element(ah, ah + n_used);
            double sum = 0.0;
            for (int64_t i = 0; i < n_used; ++i) sum += (ah[i] = std::exp(ah[i] - mx));
            const float inv = (float) (1.0 / sum);
            for (int64_t i = 0; i < n_used; ++i) ah[i] *= inv;
        }
        for (int64_t i = 0; i < n_used; ++i) {  // weighted sum, the group's heads per latent row
            const float * k = key(i);
            for (int64_t h = h0; h < h1; ++h) {
                float * out = (float *) ((char *) dst->data + h * dst->nb[2] + t * dst->nb[3]);
                const float p = a[h * n_sel + i];
                for (int64_t j = 0; j < kvr; ++j) out[j] += p * k[j];
            }
        }
    }
}

}  // namespace

ggml_tensor * sparse_attention(ggml_context * ctx, ggml_tensor * q_abs, ggml_tensor * latent, ggml_tensor * rows,
                               ggml_tensor * mask, const float * scale) {
    const ggml_type lt = latent->type;
    const bool latent_ok = lt == GGML_TYPE_F32 || lt == GGML_TYPE_F16 || lt == GGML_TYPE_BF16 || lt == GGML_TYPE_Q8_0 ||
                           lt == GGML_TYPE_Q4_0;
    if (q_abs->type != GGML_TYPE_F32 || !latent_ok || rows->type != GGML_TYPE_I32 || mask->type != GGML_TYPE_F32 ||
        q_abs->nb[0] != sizeof(float) || latent->nb[0] != ggml_type_size(lt)) {
        throw std::invalid_argument("sparse_attention: q_abs must be f32 rows, latent f32, f16, bf16, q8_0 or q4_0 rows, "
                                    "rows i32, mask f32");
    }
    if (latent->ne[0] != q_abs->ne[0] || rows->ne[1] != q_abs->ne[1] || mask->ne[0] != rows->ne[0] ||
        mask->ne[3] != rows->ne[1]) {
        throw std::invalid_argument("sparse_attention: shapes do not fit: q_abs [" + std::to_string(q_abs->ne[0]) + ", " +
                                    std::to_string(q_abs->ne[1]) + ", " + std::to_string(q_abs->ne[2]) +
                                    "], latent rows of " + std::to_string(latent->ne[0]) + ", rows [" +
                                    std::to_string(rows->ne[0]) + ", " + std::to_string(rows->ne[1]) + "]");
    }
    ggml_tensor * args[] = {q_abs, latent, rows, mask};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, q_abs->ne[0], 1, q_abs->ne[2], q_abs->ne[1], args, 4, sparse_attention_op,
                          GGML_N_TASKS_MAX, (void *) scale);
}

}  // namespace glm5next
