#include "graph/mhc_ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "ggml-cpu.h"
#include "graph/cpu_arch.h"

namespace glm5next {

namespace {

template <typename T>
const T & at(const ggml_tensor * t, int64_t i0, int64_t i1, int64_t i2) {
    return *(const T *) ((const char *) t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2]);
}

// out[i] += a[i] * w for i < n: the product fused into the sum (one rounding, std::fma) or rounded first, as ggml's
// kernels sum (mix_sums). This file is compiled with -ffp-contract=off (CMakeLists.txt), so the rounded form stays
// two roundings whatever the target; the fused one takes the FMA instruction where it is compiled for it.
template <bool kFused>
inline void mul_add_row(float * out, const float * a, float w, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = kFused ? std::fma(a[i], w, out[i]) : out[i] + a[i] * w;
}

// The mixes as ggml custom ops (their userdata unused), in the form ggml sums.
template <bool kFused>
void hc_pre_rows(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *pre = dst->src[1];
    const int64_t n_embd = dst->ne[0], hc = x->ne[1];
    for (int64_t t = ith; t < dst->ne[1]; t += nth) {
        float * out = (float *) ((char *) dst->data + t * dst->nb[1]);
        for (int64_t i = 0; i < n_embd; ++i) out[i] = 0.0f;
        for (int64_t s = 0; s < hc; ++s) {
            mul_add_row<kFused>(out, &at<float>(x, 0, s, t), at<float>(pre, s, t, 0), n_embd);
        }
    }
}

template <bool kFused>
void hc_post_rows(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *residual = dst->src[1], *post = dst->src[2], *comb = dst->src[3];
    const int64_t n_embd = dst->ne[0], hc = dst->ne[1], n_rows = hc * dst->ne[2];
    for (int64_t r = ith; r < n_rows; r += nth) {  // one output row (stream d of token t) per step
        const int64_t d = r % hc, t = r / hc;
        const float * xt = &at<float>(x, 0, t, 0);
        const float p = at<float>(post, d, t, 0);
        float * out = (float *) ((char *) dst->data + d * dst->nb[1] + t * dst->nb[2]);
        for (int64_t i = 0; i < n_embd; ++i) out[i] = xt[i] * p;
        for (int64_t s = 0; s < hc; ++s) {
            mul_add_row<kFused>(out, &at<float>(residual, 0, s, t), at<float>(comb, d, s, t), n_embd);
        }
    }
}

#if GLM5NEXT_X86_KERNELS
// The fused sums with the FMA instruction (x86-64's baseline has none: std::fma would be a libm call per value).
__attribute__((target("fma"))) void hc_pre_fused(ggml_tensor * dst, int ith, int nth, void * u) {
    hc_pre_rows<true>(dst, ith, nth, u);
}
__attribute__((target("fma"))) void hc_post_fused(ggml_tensor * dst, int ith, int nth, void * u) {
    hc_post_rows<true>(dst, ith, nth, u);
}
#else
constexpr ggml_custom_op_t hc_pre_fused = hc_pre_rows<true>;
constexpr ggml_custom_op_t hc_post_fused = hc_post_rows<true>;
#endif

// How ggml's kernels of dsv4_hc_pre and dsv4_hc_post sum (`sum += x * w`): a build for a CPU with FMA (GGML_NATIVE
// on most x86-64, every aarch64) lets the compiler fuse each product into the sum, a plain x86-64 build rounds the
// product first. Seen on this project's machines: an AVX-512 Xeon whose llama-cpp-python was built natively fused,
// and the mixes rounded, 3e-4 apart in a tiny f32 model's logits between the CPU and a layer placed on an RPC device.
enum class MixSums { fused, rounded, none };

bool cpu_has_fma() {
#if GLM5NEXT_X86_KERNELS
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma");
#else
    return true;  // std::fma: the instruction on aarch64
#endif
}

// Asks ggml once, on 1 thread (runtime/graph_threads.h: no OpenMP team left on the caller's thread), over random
// values where the two forms differ: `fused` or `rounded` for the form that gives its bits (the fused one tried
// only where the CPU has FMA), `none` when neither does.
MixSums ask_ggml_mix_sums() {
    const int64_t n_embd = 64, hc = 4, T = 3;
    ggml_context * ctx = ggml_init({16 * 1024 * 1024, nullptr, false});
    if (ctx == nullptr) return MixSums::none;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto tensor = [&](int64_t a, int64_t b, int64_t c) {
        ggml_tensor * t = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, a, b, c);
        for (int64_t i = 0; i < ggml_nelements(t); ++i) ((float *) t->data)[i] = nd(rng);
        return t;
    };
    ggml_tensor *x = tensor(n_embd, T, 1), *streams = tensor(n_embd, hc, T), *pre = tensor(hc, T, 1),
                *post = tensor(hc, T, 1), *comb = tensor(hc, hc, T);
    ggml_tensor * theirs_pre = ggml_dsv4_hc_pre(ctx, streams, pre);
    ggml_tensor * theirs_post = ggml_dsv4_hc_post(ctx, x, streams, post, comb);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, theirs_pre);
    ggml_build_forward_expand(gf, theirs_post);
    MixSums out = MixSums::none;
    if (ggml_graph_compute_with_ctx(ctx, gf, 1) == GGML_STATUS_SUCCESS) {
        auto same = [&](ggml_custom_op_t pre_rows, ggml_custom_op_t post_rows) {
            ggml_tensor * ours_pre = ggml_dup_tensor(ctx, theirs_pre);
            ggml_tensor * ours_post = ggml_dup_tensor(ctx, theirs_post);
            ours_pre->src[0] = streams, ours_pre->src[1] = pre;
            ours_post->src[0] = x, ours_post->src[1] = streams, ours_post->src[2] = post, ours_post->src[3] = comb;
            pre_rows(ours_pre, 0, 1, nullptr);
            post_rows(ours_post, 0, 1, nullptr);
            return std::memcmp(ours_pre->data, theirs_pre->data, ggml_nbytes(ours_pre)) == 0 &&
                   std::memcmp(ours_post->data, theirs_post->data, ggml_nbytes(ours_post)) == 0;
        };
        if (cpu_has_fma() && same(hc_pre_fused, hc_post_fused)) {
            out = MixSums::fused;
        } else if (same(hc_pre_rows<false>, hc_post_rows<false>)) {
            out = MixSums::rounded;
        }
    }
    ggml_free(ctx);
    return out;
}

MixSums mix_sums() {
    static const MixSums sums = ask_ggml_mix_sums();
    return sums;
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

// Refuses a mix op where neither form is ggml's (hc_mix_kernels_available), naming it.
void check_mix_sums(const char * op) {
    if (mix_sums() == MixSums::none) {
        throw std::invalid_argument(std::string(op) + ": neither of its sums gives ggml's dsv4 mixes' bits here "
                                    "(hc_mix_kernels_available)");
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
    check_mix_sums("hc_pre_mix");
    ggml_tensor * args[] = {x, pre};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, n_embd, T, 1, 1, args, 2,
                          mix_sums() == MixSums::fused ? hc_pre_fused : hc_pre_rows<false>, GGML_N_TASKS_MAX,
                          nullptr);
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
    check_mix_sums("hc_post_mix");
    ggml_tensor * args[] = {x, residual, post, comb};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, n_embd, hc, T, 1, args, 4,
                          mix_sums() == MixSums::fused ? hc_post_fused : hc_post_rows<false>, GGML_N_TASKS_MAX,
                          nullptr);
}

bool hc_mix_kernels_available() { return mix_sums() != MixSums::none; }

}  // namespace glm5next
