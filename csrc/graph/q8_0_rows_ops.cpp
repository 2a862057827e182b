#include "graph/q8_0_rows_ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "graph/cpu_arch.h"
#include "graph/rows_operands.h"

#if GLM5NEXT_X86_KERNELS
#include <immintrin.h>

#define GLM5NEXT_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define GLM5NEXT_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace glm5next {

namespace {

constexpr const char * kOpName = "q8_0_rows";
constexpr int64_t kBlock = 32;  // values per q8_0 block (ggml-common.h QK8_0)
struct BlockQ8 {                // ggml-common.h block_q8_0
    ggml_fp16_t d;
    int8_t qs[kBlock];
};
static_assert(sizeof(BlockQ8) == 34, "block_q8_0 is 34 bytes");

#if GLM5NEXT_X86_KERNELS
// A chunk is up to 8 rows of x (the product's columns), in pairs: per block, each pair's 32 + 32 quantized values
// side by side (one 512-bit register) and each value's scale 8 times per row (the lanes it multiplies).
constexpr int kPairs = 4;
// Past this many rows of x, a copy node quantizes them before the op (ggml splits its rows over the threads) instead
// of every thread quantizing all of them: a 512-row prompt ubatch's down projection (8 experts per token) would have
// each of n threads quantize 4096 rows.
constexpr int64_t kQuantizeInGraph = 16;
constexpr int kChunkRows = 2 * kPairs;
// The weight rows multiplied with one chunk after another (multiply): ~64 KB, an L2's share.
constexpr int64_t kTileBytes = 64 * 1024;

// What one product reads and writes (x: f32 rows, or q8_0 ones when x_q8_0).
struct Operands : RowsOperands {
    bool x_q8_0;  // x quantized already (by a copy node before the op: kQuantizeInGraph)
};

// Per thread: the quantized rows of x, the columns of the matrix at hand and its packed chunks.
struct Scratch {
    std::vector<BlockQ8> xq;
    RowsColumns cols;  // per matrix: (j, t)
    std::vector<int8_t> yq;
    std::vector<float> yd;
};

// The dots of a weight row (nb blocks) with a packed chunk of n (1..8) rows of x (pack): out[0, n).
using DotChunk = void (*)(int64_t n, const BlockQ8 * w, int64_t nb, const int8_t * yq, const float * yd, float * out);

// ggml-cpu/arch/x86/quants.c hsum_float_8, the same adds in the same order.
GLM5NEXT_AVX2 inline float hsum_float_8(__m256 x) {
    __m128 res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    return _mm_cvtss_f32(res);
}

// The dots of one weight row with the rows of a chunk (NP pairs, the last one a single row when ODD), each as
// ggml_vec_dot_q8_0_q8_0 computes it: per block, lane i holds the sum of products 4i..4i+3 (exact in int32, whether
// by dpbusd or maddubs), times d_w * d_x and added by one fused multiply-add per lane; the lanes summed by
// hsum_float_8 at the end. x < 0 negates y and |x| multiplies (vec_dot's sign trick; where x is 0 the product is 0
// either way). A single row takes 256-bit registers: half the work of a pair (one routed row per expert, decode).
template <int NP, bool ODD>
GLM5NEXT_AVX512 void dot_chunk(const BlockQ8 * w, int64_t nb, const int8_t * yq, const float * yd, float * out) {
    constexpr int kFull = ODD ? NP - 1 : NP;
    __m512 acc[NP];
    __m256 acc1 = _mm256_setzero_ps();
    for (int p = 0; p < NP; ++p) acc[p] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t ib = 0; ib < nb; ++ib) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *) w[ib].qs);
        const __mmask32 neg32 = _mm256_movepi8_mask(qx);
        const uint64_t neg_bits = _cvtmask32_u32(neg32);
        const __mmask64 neg = _cvtu64_mask64(neg_bits | (neg_bits << 32));
        const __m256i ax1 = _mm256_abs_epi8(qx);
        const __m512i ax = _mm512_broadcast_i64x4(ax1);
        const float dw1 = _cvtsh_ss(w[ib].d);
        const __m512 dw = _mm512_set1_ps(dw1);
        const int8_t * yb = yq + ib * kPairs * 64;
        const float * db = yd + ib * kPairs * 16;
        for (int p = 0; p < kFull; ++p) {
            const __m512i y = _mm512_loadu_si512(yb + p * 64);
            const __m512i sy = _mm512_mask_sub_epi8(y, neg, zero, y);
            const __m512 q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ax, sy));
            acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_loadu_ps(db + p * 16)), q, acc[p]);
        }
        if (ODD) {
            const __m256i y = _mm256_loadu_si256((const __m256i *) (yb + kFull * 64));
            const __m256i sy = _mm256_mask_sub_epi8(y, neg32, _mm256_setzero_si256(), y);
            const __m256 q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ax1, sy));
            acc1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dw1), _mm256_loadu_ps(db + kFull * 16)), q, acc1);
        }
    }
    for (int p = 0; p < kFull; ++p) {
        out[2 * p] = hsum_float_8(_mm512_castps512_ps256(acc[p]));
        out[2 * p + 1] = hsum_float_8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1)));
    }
    if (ODD) out[2 * kFull] = hsum_float_8(acc1);
}

// dot_chunk on AVX2 (no AVX-512: e.g. AMD EPYC before Zen 4): N rows, each as ggml_vec_dot_q8_0_q8_0's AVX2 path
// computes it (mul_sum_i8_pairs_float: |x| times y signed by x through maddubs and a madd by ones, exact in int32;
// then the same fused multiply-add by d_w * d_x per block and hsum_float_8), each weight block loaded and its
// absolute values taken once for the chunk's rows. Row r of the chunk lies at yq + r * 32 and its scale at
// yd[r * 8] in pack's layout (pair r / 2, half r % 2).
template <int N>
GLM5NEXT_AVX2 void dot_chunk_avx2(const BlockQ8 * w, int64_t nb, const int8_t * yq, const float * yd, float * out) {
    __m256 acc[N];
    for (int r = 0; r < N; ++r) acc[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t ib = 0; ib < nb; ++ib) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *) w[ib].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        // d_w * d_x as vec_dot's set1(d_w * d_x): the same product in every lane, from x's 8 copies (pack); a
        // broadcast of the scalar product per row was ~12% slower (AVX2 measure above)
        const __m256 dw = _mm256_set1_ps(_cvtsh_ss(w[ib].d));
        const int8_t * yb = yq + ib * kPairs * 64;
        const float * db = yd + ib * kPairs * 16;
        for (int r = 0; r < N; ++r) {
            const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *) (yb + r * kBlock)), qx);
            const __m256 q = _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, _mm256_maddubs_epi16(ax, sy)));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(db + r * 8)), q, acc[r]);
        }
    }
    for (int r = 0; r < N; ++r) out[r] = hsum_float_8(acc[r]);
}

GLM5NEXT_AVX2 void dot_chunk_n_avx2(int64_t n, const BlockQ8 * w, int64_t nb, const int8_t * yq, const float * yd,
                                    float * out) {
    switch (n) {
        case 1: dot_chunk_avx2<1>(w, nb, yq, yd, out); break;
        case 2: dot_chunk_avx2<2>(w, nb, yq, yd, out); break;
        case 3: dot_chunk_avx2<3>(w, nb, yq, yd, out); break;
        case 4: dot_chunk_avx2<4>(w, nb, yq, yd, out); break;
        case 5: dot_chunk_avx2<5>(w, nb, yq, yd, out); break;
        case 6: dot_chunk_avx2<6>(w, nb, yq, yd, out); break;
        case 7: dot_chunk_avx2<7>(w, nb, yq, yd, out); break;
        default: dot_chunk_avx2<8>(w, nb, yq, yd, out); break;
    }
}

// The dots of a weight row with a chunk of n (1..8) rows (AVX-512 VNNI).
GLM5NEXT_AVX512 void dot_chunk_n(int64_t n, const BlockQ8 * w, int64_t nb, const int8_t * yq, const float * yd,
                                 float * out) {
    switch (n) {
        case 1: dot_chunk<1, true>(w, nb, yq, yd, out); break;
        case 2: dot_chunk<1, false>(w, nb, yq, yd, out); break;
        case 3: dot_chunk<2, true>(w, nb, yq, yd, out); break;
        case 4: dot_chunk<2, false>(w, nb, yq, yd, out); break;
        case 5: dot_chunk<3, true>(w, nb, yq, yd, out); break;
        case 6: dot_chunk<3, false>(w, nb, yq, yd, out); break;
        case 7: dot_chunk<4, true>(w, nb, yq, yd, out); break;
        default: dot_chunk<4, false>(w, nb, yq, yd, out); break;
    }
}

// The quantized row of x that column (j, t) multiplies: x[:, j % x_ne1, t].
const BlockQ8 * x_row(const Operands & o, const Scratch & s, int64_t j, int64_t t) {
    const int64_t i = j % o.x_ne1;
    if (o.x_q8_0) return (const BlockQ8 *) (o.x + i * o.x_nb1 + t * o.x_nb2);
    return s.xq.data() + (i + t * o.x_ne1) * (o.K / kBlock);
}

// Packs the columns `cols` into chunks; a last pair's missing row is zeros (dot_chunk reads only the first half of a
// single row's pair).
void pack(const Operands & o, const std::vector<std::pair<int64_t, int64_t>> & cols, Scratch & s) {
    const int64_t nb = o.K / kBlock, n_chunks = (int64_t) (cols.size() + kChunkRows - 1) / kChunkRows;
    s.yq.assign(n_chunks * nb * kPairs * 64, 0);
    s.yd.assign(n_chunks * nb * kPairs * 16, 0.0f);
    for (size_t c = 0; c < cols.size(); ++c) {
        const auto [j, t] = cols[c];
        const BlockQ8 * row = x_row(o, s, j, t);
        const int64_t chunk = c / kChunkRows, p = (c % kChunkRows) / 2, half = c % 2;
        for (int64_t ib = 0; ib < nb; ++ib) {
            const int64_t at = (chunk * nb + ib) * kPairs + p;
            std::memcpy(&s.yq[at * 64 + half * kBlock], row[ib].qs, kBlock);
            std::fill_n(&s.yd[at * 16 + half * 8], 8, ggml_fp16_to_fp32(row[ib].d));
        }
    }
}

// This thread's share of the product: rows [M*ith/nth, M*(ith+1)/nth) of every matrix a column is routed to. Each
// thread quantizes (unless a node before did) and packs the rows of x itself: no barrier inside an op. `dot`: the
// instruction set's dot_chunk_n.
void multiply(const Operands & o, int ith, int nth, DotChunk dot) {
    const int64_t r0 = o.M * ith / nth, r1 = o.M * (ith + 1) / nth, nb = o.K / kBlock;
    if (r0 >= r1) return;
    thread_local Scratch s;
    if (!o.x_q8_0) {
        const ggml_from_float_t quantize = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
        s.xq.resize(o.x_ne1 * o.T * nb);
        for (int64_t t = 0; t < o.T; ++t) {
            for (int64_t i = 0; i < o.x_ne1; ++i) {
                quantize((const float *) (o.x + i * o.x_nb1 + t * o.x_nb2), s.xq.data() + (i + t * o.x_ne1) * nb, o.K);
            }
        }
    }
    route_columns(o, s.cols);
    float dots[kChunkRows];
    for (int64_t e = 0; e < o.n_mat; ++e) {
        const auto & cols = s.cols[e];
        if (cols.empty()) continue;
        pack(o, cols, s);
        // weight rows by tiles of ~kTileBytes, each tile's rows against one chunk after another, so that a chunk
        // stays in L1 and a tile in L2. Before, each weight row read every chunk again from L2. Measured on AVX2
        // (AMD EPYC, 2 threads, 512 rows over 32 experts, 4 per row, fastest of 9): the down projection (K 512,
        // M 1024) 42 -> 19 ms, gate (K 1024, M 512) 25 -> 17 ms; ggml's mul_mat_id 27-31 and 25-29 ms
        const int64_t tile = std::max<int64_t>(1, kTileBytes / (int64_t) o.w_nb1);
        for (int64_t rt = r0; rt < r1; rt += tile) {
            const int64_t rt_end = std::min(r1, rt + tile);
            for (size_t c0 = 0; c0 < cols.size(); c0 += kChunkRows) {
                const int64_t n = std::min<int64_t>(kChunkRows, cols.size() - c0);
                const int64_t chunk = c0 / kChunkRows;
                for (int64_t r = rt; r < rt_end; ++r) {
                    const BlockQ8 * wr = (const BlockQ8 *) (o.w + r * o.w_nb1 + e * o.w_nb2);
                    dot(n, wr, nb, &s.yq[chunk * nb * kPairs * 64], &s.yd[chunk * nb * kPairs * 16], dots);
                    for (int64_t c = 0; c < n; ++c) {
                        const auto [j, t] = cols[c0 + c];
                        *(float *) (o.out + r * sizeof(float) + j * o.out_nb1 + t * o.out_nb2) = dots[c];
                    }
                }
            }
        }
    }
}

// The kernel against ggml's vec_dot on random rows (an odd number of blocks, rows of several scales, 11 columns:
// a full chunk and a last odd pair), bit for bit.
bool matches_vec_dot(DotChunk dot) {
    ggml_cpu_init();
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0);
    if (traits == nullptr || traits->from_float == nullptr || traits->vec_dot == nullptr ||
        traits->vec_dot_type != GGML_TYPE_Q8_0) {
        return false;
    }
    const int64_t K = 37 * kBlock, M = 5, N = 11, nb = K / kBlock;
    std::mt19937 rng(7);
    std::vector<float> wf = check_rows(rng, M, K), x = check_rows(rng, N, K);
    std::vector<BlockQ8> w(M * nb), xq(N * nb);
    for (int64_t r = 0; r < M; ++r) traits->from_float(wf.data() + r * K, w.data() + r * nb, K);
    for (int64_t r = 0; r < N; ++r) traits->from_float(x.data() + r * K, xq.data() + r * nb, K);
    std::vector<float> out(M * N);
    const Operands o = {{(const char *) w.data(), nb * sizeof(BlockQ8), M * nb * sizeof(BlockQ8), K, M, 1,
                         (const char *) x.data(), K * sizeof(float), N * K * sizeof(float), N,
                         nullptr, 0, 0, (char *) out.data(), M * sizeof(float), N * M * sizeof(float), N, 1}, false};
    multiply(o, 0, 1, dot);
    for (int64_t j = 0; j < N; ++j) {
        for (int64_t r = 0; r < M; ++r) {
            float ref = 0.0f;
            traits->vec_dot((int) K, &ref, 0, w.data() + r * nb, 0, xq.data() + j * nb, 0, 1);
            if (std::memcmp(&ref, &out[j * M + r], sizeof(float)) != 0) return false;
        }
    }
    return true;
}

// This CPU's dot_chunk_n that gives ggml's vec_dot bits (the check above, made once): AVX-512 VNNI's where the CPU
// has it, else AVX2's; null where neither runs or matches.
DotChunk kernel() {
    static const DotChunk chosen = []() -> DotChunk {
        const bool avx2 = cpu_has_avx2_fma_f16c();
        const bool avx512 = avx2 && avx512_kernels_allowed() && __builtin_cpu_supports("avx512f") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                            __builtin_cpu_supports("avx512vnni");
        if (avx512 && matches_vec_dot(dot_chunk_n)) return dot_chunk_n;
        if (avx2 && matches_vec_dot(dot_chunk_n_avx2)) return dot_chunk_n_avx2;
        return nullptr;
    }();
    return chosen;
}

void q8_0_rows_op(ggml_tensor * dst, int ith, int nth, void *) {
    const Operands o = {RowsOperands::of(dst), dst->src[1]->type == GGML_TYPE_Q8_0};
    multiply(o, ith, nth, kernel());
}

#endif  // GLM5NEXT_X86_KERNELS

}  // namespace

bool q8_0_rows_kernel_available() { return *q8_0_rows_kernel_isa() != '\0'; }

const char * q8_0_rows_kernel_isa() {
#if !GLM5NEXT_X86_KERNELS
    return "";  // x86 code, compiled for x86-64 only (graph/cpu_arch.h)
#else
    const DotChunk dot = kernel();
    return dot == dot_chunk_n ? "avx512vnni" : dot == dot_chunk_n_avx2 ? "avx2" : "";
#endif
}

ggml_tensor * q8_0_mul_mat_rows(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids) {
    if (w->type != GGML_TYPE_Q8_0 || !ggml_is_contiguous(w) || w->ne[0] % kBlock != 0 || w->ne[3] != 1) {
        throw std::invalid_argument(std::string("q8_0_mul_mat_rows: w ") + w->name +
                                    " must be contiguous q8_0 [K, M] or [K, M, n_expert] with K a multiple of 32");
    }
    check_rows_operands("q8_0_mul_mat_rows", w, x, ids);
    if (!q8_0_rows_kernel_available()) {
        throw std::invalid_argument("q8_0_mul_mat_rows: this CPU lacks AVX2/FMA/F16C, the kernel differs from ggml's "
                                    "vec_dot here, or this build has no x86 kernels (q8_0_rows_kernel_available)");
    }
#if !GLM5NEXT_X86_KERNELS
    (void) ctx;
    return nullptr;  // not reached: never available without the x86 kernels (above)
#else
    if (x->ne[1] * x->ne[2] > kQuantizeInGraph) {  // quantized once, by ggml's threads (its CPU copy: from_float)
        ggml_tensor * flat = ggml_reshape_2d(ctx, ggml_is_contiguous(x) ? x : ggml_cont(ctx, x), x->ne[0], x->ne[1] * x->ne[2]);
        ggml_tensor * q = ggml_cpy(ctx, flat, ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, x->ne[0], x->ne[1] * x->ne[2]));
        x = ggml_reshape_3d(ctx, q, x->ne[0], x->ne[1], x->ne[2]);
    }
    return rows_op_node(ctx, w, x, ids, q8_0_rows_op, kOpName);
#endif
}

bool is_q8_0_rows(const ggml_tensor * node) {
    return node->op == GGML_OP_CUSTOM && std::strcmp(node->name, kOpName) == 0;
}

}  // namespace glm5next
