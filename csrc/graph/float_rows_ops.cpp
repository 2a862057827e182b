#include "graph/float_rows_ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "graph/cpu_arch.h"
#include "graph/ggml_simd_sums.h"
#include "graph/rows_operands.h"

#if GLM5NEXT_X86_KERNELS
#include <immintrin.h>

#define GLM5NEXT_AVX512F __attribute__((target("avx2,fma,f16c,avx512f")))
#define GLM5NEXT_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace glm5next {

namespace {

constexpr const char * kF16Name = "f16_rows";
constexpr const char * kF32Name = "f32_rows";
// f32 rows a multiple of this many values long have no leftovers on either instruction set: GGML_F32_STEP on
// AVX-512 (4 registers of 16; 32 on AVX2)
constexpr int64_t kF32Multiple = 64;

#if GLM5NEXT_X86_KERNELS
constexpr int kChunkRows = 4;  // rows of x per pass over a weight row: 4 x 4 accumulators, 4 weight registers

// The instruction set a kernel computes with, as ggml's vec_dot does on the CPU it was built for: 4 accumulators of
// 16 lanes (AVX-512 F) or of 8 (AVX2), a step of 64 or 32 values.
enum class Isa { avx512f, avx2 };
constexpr int64_t step_of(Isa isa) { return isa == Isa::avx512f ? 64 : 32; }

// Per thread: x's rows as the kernel reads them (f16 weights: rounded to f16 by ggml's from_float, widened back,
// exactly) and the columns of each matrix.
struct Scratch {
    std::vector<float> xr;
    std::vector<ggml_fp16_t> xh;
    RowsColumns cols;  // per matrix: (j, t)
};

// The weight values i..i+15 as f32: an f16 row widened (GGML_F32Cx16_LOAD), an f32 row as it is.
template <ggml_type W>
GLM5NEXT_AVX512F inline __m512 load_w(const void * w, int64_t i) {
    if constexpr (W == GGML_TYPE_F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) ((const ggml_fp16_t *) w + i)));
    } else {
        return _mm512_loadu_ps((const float *) w + i);
    }
}

// The dots of one weight row with R rows of x (xr[r], K values each) over their first K & ~63 values, as ggml's
// vec_dot of type W computes them (float_mul_mat_rows' comment), into s[r] (ggml_float, double): the weight
// registers loaded once per step for all R rows.
template <ggml_type W, int R>
GLM5NEXT_AVX512F void dot_rows(const void * w, int64_t K, const float * const * xr, double * s) {
    constexpr int64_t step = step_of(Isa::avx512f);
    const int64_t np = K & ~(step - 1);
    __m512 sum[R][4];
    for (int r = 0; r < R; ++r) {
        for (int j = 0; j < 4; ++j) sum[r][j] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < np; i += step) {
        for (int j = 0; j < 4; ++j) {
            const __m512 wj = load_w<W>(w, i + 16 * j);
            for (int r = 0; r < R; ++r) sum[r][j] = _mm512_fmadd_ps(wj, _mm512_loadu_ps(xr[r] + i + 16 * j), sum[r][j]);
        }
    }
    for (int r = 0; r < R; ++r) {
        // GGML_F32x16_REDUCE with GGML_F32_ARR = 4: offsets 2, then 1
        sum[r][0] = _mm512_add_ps(sum[r][0], sum[r][2]);
        sum[r][1] = _mm512_add_ps(sum[r][1], sum[r][3]);
        sum[r][0] = _mm512_add_ps(sum[r][0], sum[r][1]);
        s[r] = (double) _mm512_reduce_add_ps(sum[r][0]);
    }
}

// The weight values i..i+7 as f32 (GGML_F32Cx8_LOAD for f16).
template <ggml_type W>
GLM5NEXT_AVX2 inline __m256 load_w8(const void * w, int64_t i) {
    if constexpr (W == GGML_TYPE_F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) ((const ggml_fp16_t *) w + i)));
    } else {
        return _mm256_loadu_ps((const float *) w + i);
    }
}

// dot_rows with AVX2: steps of 32 values over 4 registers of 8, summed as GGML_F32x8_REDUCE (graph/ggml_simd_sums.h).
template <ggml_type W, int R>
GLM5NEXT_AVX2 void dot_rows_avx2(const void * w, int64_t K, const float * const * xr, double * s) {
    constexpr int64_t step = step_of(Isa::avx2);
    const int64_t np = K & ~(step - 1);
    __m256 sum[R][4];
    for (int r = 0; r < R; ++r) {
        for (int j = 0; j < 4; ++j) sum[r][j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < np; i += step) {
        for (int j = 0; j < 4; ++j) {
            const __m256 wj = load_w8<W>(w, i + 8 * j);
            for (int r = 0; r < R; ++r) sum[r][j] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xr[r] + i + 8 * j), sum[r][j]);
        }
    }
    for (int r = 0; r < R; ++r) s[r] = (double) f32x8_reduce4(sum[r][0], sum[r][1], sum[r][2], sum[r][3]);
}

template <ggml_type W, Isa I, int R>
void dot_rows_of(const void * w, int64_t K, const float * const * xr, double * s) {
    if constexpr (I == Isa::avx512f) {
        dot_rows<W, R>(w, K, xr, s);
    } else {
        dot_rows_avx2<W, R>(w, K, xr, s);
    }
}

template <ggml_type W, Isa I>
void dot_rows_n(int64_t n, const void * w, int64_t K, const float * const * xr, double * s) {
    switch (n) {
        case 1: dot_rows_of<W, I, 1>(w, K, xr, s); break;
        case 2: dot_rows_of<W, I, 2>(w, K, xr, s); break;
        case 3: dot_rows_of<W, I, 3>(w, K, xr, s); break;
        default: dot_rows_of<W, I, 4>(w, K, xr, s); break;
    }
}

// vec_dot_f16's leftovers (the values past the last step) of nq f16 weight rows (w[q]) with n rows of x, added to
// s[q][c]: each a float product (exact: two f16 values) added in double one by one, in order, as vec_dot adds them;
// the nq * n chains of adds side by side, where vec_dot runs one after the other (KDA's f_b and g_b rows are 48
// values: all leftovers on AVX-512, and a chain of dependent adds per element of the product).
GLM5NEXT_AVX2 void f16_leftovers(int64_t nq, int64_t n, const ggml_fp16_t * const * w, int64_t np, int64_t K,
                                 const float * const * xr, double (*s)[kChunkRows]) {
    for (int64_t i = np; i < K; ++i) {
        for (int64_t q = 0; q < nq; ++q) {
            const float wi = _cvtsh_ss(w[q][i]);
            for (int64_t c = 0; c < n; ++c) s[q][c] += (double) (wi * xr[c][i]);
        }
    }
}

// This thread's share of the product: rows [M*ith/nth, M*(ith+1)/nth) of every matrix a column is routed to. Each
// thread prepares the rows of x itself (no barrier inside an op).
template <ggml_type W, Isa I>
void multiply(const RowsOperands & o, int ith, int nth) {
    const int64_t r0 = o.M * ith / nth, r1 = o.M * (ith + 1) / nth, K = o.K;
    if (r0 >= r1) return;
    thread_local Scratch s;
    const int64_t n_x = o.x_ne1 * o.T;
    auto x_row = [&](int64_t i, int64_t t) { return (const float *) (o.x + i * o.x_nb1 + t * o.x_nb2); };
    if constexpr (W == GGML_TYPE_F16) {  // as ggml_mul_mat converts x for vec_dot_f16: from_float to f16
        const ggml_from_float_t to_f16 = ggml_get_type_traits_cpu(GGML_TYPE_F16)->from_float;
        s.xr.resize(n_x * K);
        s.xh.resize(K);
        for (int64_t t = 0; t < o.T; ++t) {
            for (int64_t i = 0; i < o.x_ne1; ++i) {
                to_f16(x_row(i, t), s.xh.data(), K);
                ggml_fp16_to_fp32_row(s.xh.data(), s.xr.data() + (i + t * o.x_ne1) * K, K);  // exact
            }
        }
    }
    auto row_of = [&](int64_t j, int64_t t) -> const float * {
        const int64_t i = j % o.x_ne1;
        return W == GGML_TYPE_F16 ? s.xr.data() + (i + t * o.x_ne1) * K : x_row(i, t);
    };
    route_columns(o, s.cols);
    const float * xr[kChunkRows];
    const int64_t np = K & ~(step_of(I) - 1);
    constexpr int64_t kWRows = 4;  // weight rows whose leftovers run side by side
    double dots[kWRows][kChunkRows];
    const ggml_fp16_t * wq[kWRows];
    for (int64_t e = 0; e < o.n_mat; ++e) {
        const auto & cols = s.cols[e];
        for (size_t c0 = 0; c0 < cols.size(); c0 += kChunkRows) {
            const int64_t n = std::min<int64_t>(kChunkRows, (int64_t) (cols.size() - c0));
            for (int64_t c = 0; c < n; ++c) xr[c] = row_of(cols[c0 + c].first, cols[c0 + c].second);
            for (int64_t r = r0; r < r1; r += kWRows) {
                const int64_t nq = std::min(kWRows, r1 - r);
                for (int64_t q = 0; q < nq; ++q) {
                    const char * wr = o.w + (r + q) * o.w_nb1 + e * o.w_nb2;
                    dot_rows_n<W, I>(n, wr, K, xr, dots[q]);
                    wq[q] = (const ggml_fp16_t *) wr;
                }
                if (W == GGML_TYPE_F16 && np < K) f16_leftovers(nq, n, wq, np, K, xr, dots);
                for (int64_t q = 0; q < nq; ++q) {
                    for (int64_t c = 0; c < n; ++c) {
                        const auto [j, t] = cols[c0 + c];
                        *(float *) (o.out + (r + q) * sizeof(float) + j * o.out_nb1 + t * o.out_nb2) = (float) dots[q][c];
                    }
                }
            }
        }
    }
}

// multiply for weights of `type` (f16, else f32).
template <Isa I>
void multiply_as(ggml_type type, const RowsOperands & o, int ith, int nth) {
    if (type == GGML_TYPE_F16) {
        multiply<GGML_TYPE_F16, I>(o, ith, nth);
    } else {
        multiply<GGML_TYPE_F32, I>(o, ith, nth);
    }
}

template <Isa I>
void float_rows_op(ggml_tensor * dst, int ith, int nth, void *) {
    multiply_as<I>(dst->src[0]->type, RowsOperands::of(dst), ith, nth);
}

// The kernel of instruction set I against ggml's vec_dot of `type` on random rows (for f16 a row length with
// leftovers past the last 64; 7 columns: a full chunk and a last one of 3), bit for bit.
template <Isa I>
bool matches_vec_dot(ggml_type type) {
    ggml_cpu_init();
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(type);
    if (traits == nullptr || traits->vec_dot == nullptr || traits->vec_dot_type != type ||
        (type == GGML_TYPE_F16 && traits->from_float == nullptr)) {
        return false;
    }
    const int64_t K = type == GGML_TYPE_F16 ? 5 * kF32Multiple + 48 : 5 * kF32Multiple, M = 5, N = 7;
    std::mt19937 rng(11);
    const std::vector<float> wf = check_rows(rng, M, K), x = check_rows(rng, N, K);
    const size_t elem = type == GGML_TYPE_F16 ? sizeof(ggml_fp16_t) : sizeof(float);
    std::vector<char> w(M * K * elem), xv(N * K * elem);  // as vec_dot reads them: w and x in `type`
    if (type == GGML_TYPE_F16) {
        traits->from_float(wf.data(), w.data(), M * K);
        traits->from_float(x.data(), xv.data(), N * K);
    } else {
        std::memcpy(w.data(), wf.data(), w.size());
        std::memcpy(xv.data(), x.data(), xv.size());
    }
    std::vector<float> out(M * N);
    const RowsOperands o = {w.data(), K * elem, M * K * elem, K, M, 1,
                        (const char *) x.data(), K * sizeof(float), N * K * sizeof(float), N,
                        nullptr, 0, 0, (char *) out.data(), M * sizeof(float), N * M * sizeof(float), N, 1};
    multiply_as<I>(type, o, 0, 1);
    for (int64_t j = 0; j < N; ++j) {
        for (int64_t r = 0; r < M; ++r) {
            float ref = 0.0f;
            traits->vec_dot((int) K, &ref, 0, w.data() + r * K * elem, 0, xv.data() + j * K * elem, 0, 1);
            if (std::memcmp(&ref, &out[j * M + r], sizeof(float)) != 0) return false;
        }
    }
    return true;
}

// The kernel for weights of `type` here: the AVX-512 one where the CPU has AVX-512 F and our kernels may use it
// (avx512_kernels_allowed), else the AVX2 one, whichever first gives ggml's bits (ggml's vec_dot sums as the CPU it
// was built for does: an AVX2 kernel does not match an AVX-512 ggml); null where none does.
ggml_custom_op_t kernel_for(ggml_type type) {
    if (!cpu_has_avx2_fma_f16c()) return nullptr;
    if (__builtin_cpu_supports("avx512f") && avx512_kernels_allowed() && matches_vec_dot<Isa::avx512f>(type)) {
        return float_rows_op<Isa::avx512f>;
    }
    return matches_vec_dot<Isa::avx2>(type) ? float_rows_op<Isa::avx2> : nullptr;
}

ggml_custom_op_t kernel(ggml_type type) {
    static const ggml_custom_op_t f16 = kernel_for(GGML_TYPE_F16), f32 = kernel_for(GGML_TYPE_F32);
    return type == GGML_TYPE_F16 ? f16 : type == GGML_TYPE_F32 ? f32 : nullptr;
}

#endif  // GLM5NEXT_X86_KERNELS

}  // namespace

bool float_rows_kernel_available(ggml_type type) { return *float_rows_kernel_isa(type) != '\0'; }

const char * float_rows_kernel_isa(ggml_type type) {
#if !GLM5NEXT_X86_KERNELS
    (void) type;
    return "";  // x86 code, compiled for x86-64 only (graph/cpu_arch.h)
#else
    const ggml_custom_op_t op = kernel(type);
    return op == nullptr ? "" : op == float_rows_op<Isa::avx512f> ? "avx512f" : "avx2";
#endif
}

bool float_rows_fit(const ggml_tensor * w) {
    return (w->type == GGML_TYPE_F16 || (w->type == GGML_TYPE_F32 && w->ne[0] % kF32Multiple == 0)) &&
           ggml_is_contiguous(w) && w->ne[3] == 1;
}

ggml_tensor * float_mul_mat_rows(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids) {
    if (!float_rows_fit(w)) {
        throw std::invalid_argument(std::string("float_mul_mat_rows: w \"") + w->name + "\" (" + ggml_type_name(w->type) +
                                    " [" + std::to_string(w->ne[0]) + ", " + std::to_string(w->ne[1]) + ", " +
                                    std::to_string(w->ne[2]) + ", " + std::to_string(w->ne[3]) + "]) must be contiguous "
                                    "f16 [K, M] or [K, M, n_mat], or such f32 with K a multiple of 64");
    }
    check_rows_operands("float_mul_mat_rows", w, x, ids);
    if (!float_rows_kernel_available(w->type)) {
        throw std::invalid_argument(std::string("float_mul_mat_rows: this CPU lacks AVX2/FMA/F16C, the kernel "
                                                "differs from ggml's ") + ggml_type_name(w->type) +
                                    " vec_dot here, or this build has no x86 kernels (float_rows_kernel_available)");
    }
#if !GLM5NEXT_X86_KERNELS
    (void) ctx;
    return nullptr;  // not reached: never available without the x86 kernels (above)
#else
    return rows_op_node(ctx, w, x, ids, kernel(w->type), w->type == GGML_TYPE_F16 ? kF16Name : kF32Name);
#endif
}

bool is_float_rows(const ggml_tensor * node) {
    return node->op == GGML_OP_CUSTOM && (std::strcmp(node->name, kF16Name) == 0 || std::strcmp(node->name, kF32Name) == 0);
}

}  // namespace glm5next
