#include "graph/delta_rule_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "graph/cpu_arch.h"
#include "graph/ggml_simd_sums.h"

#if GLM5NEXT_X86_KERNELS
#include <immintrin.h>

#define GLM5NEXT_AVX2_FMA __attribute__((target("avx2,fma")))
#endif

namespace glm5next {

namespace {

constexpr const char * kOpName = "delta_rule";

#if GLM5NEXT_X86_KERNELS
// Rows of the state run through all the tokens at once: 32 rows of 128 floats, 16 KB, half an L1.
constexpr int64_t kBlockBytes = 16 * 1024;

// What the op reads (its sources) and writes, and its snapshot slots K. in_place: `state` is a cache whose rows hold
// the sequences' states (row cells[s] of sequence s, or row s without cells), worked on there.
struct Operands {
    const ggml_tensor *q, *k, *v, *g, *beta, *state, *cells;
    float * out;
    int64_t K;
    bool in_place;
};

// One token's step of R consecutive rows j.. (n values each, a multiple of 32; v_j: their values of v): row *= e
// (ggml_vec_mul_f32); delta = (v_j - row . k) * beta (ggml_vec_dot_f32); row += k * delta (ggml_vec_mad_f32:
// GGML_F32_VEC_FMA); out = row . q (before the scale). Two passes over the rows instead of four calls each, the rows
// side by side (their sums' chains overlap), each element's arithmetic ggml's.
template <int R>
GLM5NEXT_AVX2_FMA inline void rows_step(float * rows, const float * e, const float * k, const float * q,
                                        const float * v_j, float beta, int64_t n, float * out) {
    __m256 s[R][4];
    for (int r = 0; r < R; ++r) {
        for (int u = 0; u < 4; ++u) s[r][u] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n; i += 32) {
        for (int u = 0; u < 4; ++u) {
            const __m256 ev = _mm256_loadu_ps(e + i + 8 * u), kv = _mm256_loadu_ps(k + i + 8 * u);
            for (int r = 0; r < R; ++r) {
                float * row = rows + r * n + i + 8 * u;
                const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row), ev);
                _mm256_storeu_ps(row, x);
                s[r][u] = _mm256_fmadd_ps(x, kv, s[r][u]);
            }
        }
    }
    __m256 delta[R];
    for (int r = 0; r < R; ++r) {
        delta[r] = _mm256_set1_ps((v_j[r] - f32x8_reduce4(s[r][0], s[r][1], s[r][2], s[r][3])) * beta);
        for (int u = 0; u < 4; ++u) s[r][u] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n; i += 32) {
        for (int u = 0; u < 4; ++u) {
            const __m256 kv = _mm256_loadu_ps(k + i + 8 * u), qv = _mm256_loadu_ps(q + i + 8 * u);
            for (int r = 0; r < R; ++r) {
                float * row = rows + r * n + i + 8 * u;
                const __m256 x = _mm256_fmadd_ps(kv, delta[r], _mm256_loadu_ps(row));
                _mm256_storeu_ps(row, x);
                s[r][u] = _mm256_fmadd_ps(x, qv, s[r][u]);
            }
        }
    }
    for (int r = 0; r < R; ++r) out[r] = f32x8_reduce4(s[r][0], s[r][1], s[r][2], s[r][3]);
}

// rows_step in AVX-512's order (n a multiple of 64): ggml_vec_dot_f32 built for AVX-512 sums 4 registers of 16 lanes
// per 64 values (GGML_F32_STEP) and reduces them as f32x16_reduce4; the products and updates are elementwise, the
// same at any width.
template <int R>
__attribute__((target("avx512f"))) inline void rows_step_avx512(float * rows, const float * e, const float * k,
                                                                const float * q, const float * v_j, float beta,
                                                                int64_t n, float * out) {
    __m512 s[R][4];
    for (int r = 0; r < R; ++r) {
        for (int u = 0; u < 4; ++u) s[r][u] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n; i += 64) {
        for (int u = 0; u < 4; ++u) {
            const __m512 ev = _mm512_loadu_ps(e + i + 16 * u), kv = _mm512_loadu_ps(k + i + 16 * u);
            for (int r = 0; r < R; ++r) {
                float * row = rows + r * n + i + 16 * u;
                const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(row), ev);
                _mm512_storeu_ps(row, x);
                s[r][u] = _mm512_fmadd_ps(x, kv, s[r][u]);
            }
        }
    }
    __m512 delta[R];
    for (int r = 0; r < R; ++r) {
        delta[r] = _mm512_set1_ps((v_j[r] - f32x16_reduce4(s[r][0], s[r][1], s[r][2], s[r][3])) * beta);
        for (int u = 0; u < 4; ++u) s[r][u] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n; i += 64) {
        for (int u = 0; u < 4; ++u) {
            const __m512 kv = _mm512_loadu_ps(k + i + 16 * u), qv = _mm512_loadu_ps(q + i + 16 * u);
            for (int r = 0; r < R; ++r) {
                float * row = rows + r * n + i + 16 * u;
                const __m512 x = _mm512_fmadd_ps(kv, delta[r], _mm512_loadu_ps(row));
                _mm512_storeu_ps(row, x);
                s[r][u] = _mm512_fmadd_ps(x, qv, s[r][u]);
            }
        }
    }
    for (int r = 0; r < R; ++r) out[r] = f32x16_reduce4(s[r][0], s[r][1], s[r][2], s[r][3]);
}

// One token's step of R rows in the order of sums that `wide` names (AVX-512's, else AVX2's).
template <bool wide, int R>
void step_rows(float * rows, const float * e, const float * k, const float * q, const float * v_j, float beta,
               int64_t n, float * out) {
    if constexpr (wide) {
        rows_step_avx512<R>(rows, e, k, q, v_j, beta, n, out);
    } else {
        rows_step<R>(rows, e, k, q, v_j, beta, n, out);
    }
}

const float * at(const ggml_tensor * t, int64_t i1, int64_t i2, int64_t i3) {
    return (const float *) ((const char *) t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

// This thread's share: the (head, sequence) pairs [nr * ith / nth, nr * (ith + 1) / nth); `wide`: AVX-512's sums.
template <bool wide>
void run(const Operands & o, int ith, int nth) {
    const int64_t S = o.v->ne[0], H = o.v->ne[1], T = o.v->ne[2], n_seqs = o.v->ne[3];
    const int64_t nr = H * n_seqs, ir0 = nr * ith / nth, ir1 = nr * (ith + 1) / nth;
    const float scale = 1.0f / sqrtf((float) S);
    const int64_t block = std::max<int64_t>(1, std::min<int64_t>(S, kBlockBytes / (S * (int64_t) sizeof(float))));
    const int64_t state_elems = S * S * H * n_seqs;
    float * outs = o.out;
    float * states = o.out + S * H * T * n_seqs;
    thread_local std::vector<float> e;  // exp(g) of every token of the pair at hand
    e.resize(T * S);
    for (int64_t ir = ir0; ir < ir1; ++ir) {
        const int64_t h = ir % H, s = ir / H;
        // q's and k's head and sequence for v's (ggml's: heads and sequences of q and k may be fewer, repeated)
        const int64_t hq = h % o.q->ne[1], sq = s / (n_seqs / o.q->ne[3]);
        const int64_t hk = h % o.k->ne[1], sk = s / (n_seqs / o.k->ne[3]);
        for (int64_t t = 0; t < T; ++t) {
            const float * g = at(o.g, h, t, s);
            for (int64_t i = 0; i < S; ++i) e[t * S + i] = expf(g[i]);
        }
        // slot 0: the state after the last token (K = 1: the only state kept, worked on in place as ggml does), or
        // the sequence's row of the cache (in_place: the state is worked on where it is kept)
        float * final_state = states + (s * H + h) * S * S;
        const float * s0 = (const float *) ((const char *) o.state->data + s * o.state->nb[3]) + h * S * S;
        if (o.in_place) {
            const int64_t row = o.cells ? ((const int32_t *) o.cells->data)[s] : s;
            final_state = (float *) ((char *) o.state->data + row * o.state->nb[1]) + h * S * S;
            s0 = final_state;
        }
        for (int64_t j0 = 0; j0 < S; j0 += block) {
            const int64_t j1 = std::min(S, j0 + block);
            float * rows = final_state + j0 * S;
            if (!o.in_place) std::memcpy(rows, s0 + j0 * S, (j1 - j0) * S * sizeof(float));
            for (int64_t t = 0; t < T; ++t) {
                const float *k = at(o.k, hk, t, sk), *q = at(o.q, hq, t, sq), *v = at(o.v, h, t, s);
                const float beta = *at(o.beta, h, t, s);
                float * out = outs + (s * T * H + h) * S + t * S * H;
                int64_t j = j0;
                for (; j + 2 <= j1; j += 2) {
                    step_rows<wide, 2>(final_state + j * S, &e[t * S], k, q, v + j, beta, S, out + j);
                }
                if (j < j1) step_rows<wide, 1>(final_state + j * S, &e[t * S], k, q, v + j, beta, S, out + j);
                for (j = j0; j < j1; ++j) out[j] *= scale;
                const int64_t slot = T - 1 - t;  // s tokens back from the last
                if (slot > 0 && slot < o.K) {
                    std::memcpy(states + slot * state_elems + (s * H + h) * S * S + j0 * S, rows,
                                (j1 - j0) * S * sizeof(float));
                }
            }
        }
    }
}

template <bool wide>
void delta_rule_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const Operands o = {dst->src[0], dst->src[1], dst->src[2], dst->src[3], dst->src[4], dst->src[5], nullptr,
                        (float *) dst->data, (int64_t) (intptr_t) userdata, false};
    run<wide>(o, ith, nth);
}

template <bool wide>
void delta_rule_in_place_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const Operands o = {dst->src[0], dst->src[1], dst->src[2], dst->src[3], dst->src[4], dst->src[5], dst->src[6],
                        (float *) dst->data, (int64_t) (intptr_t) userdata, true};
    run<wide>(o, ith, nth);
}

// The op in the order `wide` names, copying and in place (the states in cells 2 and 0 of a cache of three), against
// ggml's gated_delta_net on random inputs (2 heads, 2 sequences, 5 tokens, 3 snapshot slots, at S_v = 64 and 128:
// blocks of 64 and 32 rows), bit for bit, on ggml's CPU backend with 1 thread: with more, ggml-cpu opens an OpenMP
// team on the calling thread (the first to build a graph, not the one that runs them: the server's main thread at
// load), and a second live team throttles every barrier of the graph thread's team (runtime/graph_threads.h).
// Measured: glm5next-server, one client, 128 tokens, bench preset q8_0 ~60 -> ~106 tok/s, bundled (since 6a3e01f ran
// the check for its head size too) ~120-190 -> ~620-670 tok/s. The op's bits do not depend on the thread count.
template <bool wide>
bool matches_ggml() {
    ggml_cpu_init();
    for (const int64_t S : {64, 128}) {
        const int64_t H = 2, T = 5, B = 2, K = 3;
        const size_t mem = 64 * 1024 * 1024;
        ggml_context * ctx = ggml_init({mem, nullptr, false});
        if (ctx == nullptr) return false;
        std::mt19937 rng(11);
        std::normal_distribution<float> nd(0.0f, 0.5f);
        auto tensor = [&](int64_t a, int64_t b, int64_t c, int64_t d, float shift) {
            ggml_tensor * t = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a, b, c, d);
            for (int64_t i = 0; i < ggml_nelements(t); ++i) ((float *) t->data)[i] = nd(rng) + shift;
            return t;
        };
        ggml_tensor *q = tensor(S, H, T, B, 0), *k = tensor(S, H, T, B, 0), *v = tensor(S, H, T, B, 0),
                    *g = tensor(S, H, T, B, -0.5f), *beta = tensor(1, H, T, B, 0), *state = tensor(S, S, H, B, 0);
        ggml_tensor * theirs = ggml_gated_delta_net(ctx, q, k, v, g, beta, state, K);
        ggml_tensor * args[] = {q, k, v, g, beta, state};
        ggml_tensor * ours = ggml_custom_4d(ctx, GGML_TYPE_F32, theirs->ne[0], theirs->ne[1], 1, 1, args, 6,
                                            delta_rule_op<wide>, GGML_N_TASKS_MAX, (void *) (intptr_t) K);
        // in place: sequence 0's state in cell 2 of three, sequence 1's in cell 0 (cell 1 not touched)
        const size_t state_bytes = S * S * H * sizeof(float);
        ggml_tensor * cache = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, S * S * H, 3);
        ggml_tensor * cells = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, B);
        const int32_t cell_of[2] = {2, 0};
        std::memcpy(cells->data, cell_of, sizeof(cell_of));
        for (int64_t s = 0; s < B; ++s) {
            std::memcpy((char *) cache->data + cell_of[s] * state_bytes, (const char *) state->data + s * state_bytes,
                        state_bytes);
        }
        ggml_tensor * args_in_place[] = {q, k, v, g, beta, cache, cells};
        ggml_tensor * in_place = ggml_custom_4d(ctx, GGML_TYPE_F32, theirs->ne[0], theirs->ne[1], 1, 1, args_in_place,
                                                7, delta_rule_in_place_op<wide>, GGML_N_TASKS_MAX,
                                                (void *) (intptr_t) K);
        ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, theirs);
        ggml_build_forward_expand(gf, ours);
        ggml_build_forward_expand(gf, in_place);
        bool ok = ggml_graph_compute_with_ctx(ctx, gf, 1) == GGML_STATUS_SUCCESS &&
                  std::memcmp(theirs->data, ours->data, ggml_nbytes(ours)) == 0;
        // the in-place op: the outputs and slots 1..K-1 where the copying op has them, slot 0 (the final states) in
        // the cells, which it leaves unwritten in its result
        const size_t outputs = S * H * T * B * sizeof(float), slot0 = B * state_bytes;
        const char *want = (const char *) theirs->data, *got = (const char *) in_place->data;
        ok = ok && std::memcmp(want, got, outputs) == 0 &&
             std::memcmp(want + outputs + slot0, got + outputs + slot0, ggml_nbytes(theirs) - outputs - slot0) == 0;
        for (int64_t s = 0; ok && s < B; ++s) {
            ok = std::memcmp(want + outputs + s * state_bytes, (const char *) cache->data + cell_of[s] * state_bytes,
                             state_bytes) == 0;
        }
        ggml_free(ctx);
        if (!ok) return false;
    }
    return true;
}
#endif  // GLM5NEXT_X86_KERNELS

// The order of sums that gives ggml's bits here, found once by running both against ggml's op: AVX-512's where the CPU
// has it and ggml was built for it (GGML_NATIVE on such a CPU), AVX2's where ggml sums 8 lanes at a time; none
// elsewhere. GLM5NEXT_CPU_KERNELS=avx2 tries AVX2's alone (graph/cpu_arch.h).
enum class SumOrder { none, avx2, avx512 };

SumOrder sum_order() {
#if !GLM5NEXT_X86_KERNELS
    return SumOrder::none;  // x86 code, compiled for x86-64 only (graph/cpu_arch.h)
#else
    static const SumOrder order = []() {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return SumOrder::none;
        if (__builtin_cpu_supports("avx512f") && avx512_kernels_allowed() && matches_ggml<true>()) {
            return SumOrder::avx512;
        }
        return matches_ggml<false>() ? SumOrder::avx2 : SumOrder::none;
    }();
    return order;
#endif
}

}  // namespace

bool delta_rule_kernel_available() { return sum_order() != SumOrder::none; }

bool delta_rule_fits(int64_t head_size) {
    // sum_order() (its check runs ggml graphs) asked only where the answer depends on it
    return head_size > 0 && head_size % 32 == 0 && (head_size % 64 == 0 || sum_order() != SumOrder::avx512);
}

namespace {

// delta_rule's and delta_rule_in_place's checks of the operands but the state (named in the error).
void check_operands(const char * op, const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v,
                    const ggml_tensor * g, const ggml_tensor * beta, const ggml_tensor * state, int64_t K) {
    const int64_t S = v->ne[0], H = v->ne[1], T = v->ne[2], B = v->ne[3];
    auto refuse = [op](const std::string & what) { throw std::invalid_argument(std::string(op) + ": " + what); };
    for (const ggml_tensor * t : {q, k, v, g, beta, state}) {
        if (t->type != GGML_TYPE_F32) refuse(std::string(t->name) + " must be f32");
    }
    if (!delta_rule_fits(S)) {
        refuse("the head size " + std::to_string(S) + " must be a multiple of " +
               (sum_order() == SumOrder::avx512 ? "64 (AVX-512's sums)" : "32"));
    }
    for (const ggml_tensor * t : {q, k}) {
        if (t->ne[0] != S || t->ne[2] != T || H % t->ne[1] != 0 || B % t->ne[3] != 0 || t->nb[0] != sizeof(float)) {
            refuse(std::string(t->name) + " must be [S_v, H or a divisor, T, n_seqs or a divisor] with contiguous rows");
        }
    }
    if (v->nb[0] != sizeof(float)) refuse("v's rows must be contiguous");
    if (!ggml_is_contiguous(g) || g->ne[0] != S || g->ne[1] != H || g->ne[2] != T || g->ne[3] != B) {
        refuse("g must be contiguous [S_v, H, T, n_seqs] (KDA's per-channel gate)");
    }
    if (!ggml_is_contiguous(beta) || beta->ne[0] != 1 || beta->ne[1] != H || beta->ne[2] != T || beta->ne[3] != B) {
        refuse("beta must be contiguous [1, H, T, n_seqs]");
    }
    if (K < 1) refuse("K (snapshot slots) must be >= 1");
    if (!delta_rule_kernel_available()) {
        refuse("this CPU lacks AVX2/FMA, the op differs from ggml's gated_delta_net here, or this build has no x86 "
               "kernels (delta_rule_kernel_available)");
    }
}

}  // namespace

ggml_tensor * delta_rule(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * g,
                         ggml_tensor * beta, ggml_tensor * state, int64_t K) {
    const int64_t S = v->ne[0], H = v->ne[1], T = v->ne[2], B = v->ne[3];
    if (!ggml_is_contiguous(state) || state->ne[0] != S || state->ne[1] != S || state->ne[2] != H || state->ne[3] != B) {
        throw std::invalid_argument("delta_rule: state must be contiguous [S_v, S_v, H, n_seqs]");
    }
    check_operands("delta_rule", q, k, v, g, beta, state, K);
#if !GLM5NEXT_X86_KERNELS
    (void) ctx;
    return nullptr;  // not reached: never available without the x86 kernels (check_operands)
#else
    ggml_tensor * args[] = {q, k, v, g, beta, state};
    ggml_tensor * out = ggml_custom_4d(ctx, GGML_TYPE_F32, S * H, T * B + K * S * B, 1, 1, args, 6,
                                       sum_order() == SumOrder::avx512 ? delta_rule_op<true> : delta_rule_op<false>,
                                       GGML_N_TASKS_MAX, (void *) (intptr_t) K);
    ggml_set_name(out, kOpName);
    return out;
#endif
}

ggml_tensor * delta_rule_in_place(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                  ggml_tensor * g, ggml_tensor * beta, ggml_tensor * states, ggml_tensor * cells,
                                  int64_t K) {
    const int64_t S = v->ne[0], H = v->ne[1], T = v->ne[2], B = v->ne[3];
    const int64_t row = S * S * H;
    if (!ggml_is_contiguous(states) || ggml_nelements(states) % row != 0 ||
        ggml_nelements(states) / row < (cells ? 1 : B)) {
        throw std::invalid_argument("delta_rule_in_place: states must be contiguous, rows of S_v * S_v * H = " +
                                    std::to_string(row) + " values, one per sequence at least");
    }
    if (cells && (cells->type != GGML_TYPE_I32 || ggml_nelements(cells) != B || !ggml_is_contiguous(cells))) {
        throw std::invalid_argument("delta_rule_in_place: cells must be i32 [n_seqs = " + std::to_string(B) + "]");
    }
    check_operands("delta_rule_in_place", q, k, v, g, beta, states, K);
#if !GLM5NEXT_X86_KERNELS
    (void) ctx;
    return nullptr;  // not reached: never available without the x86 kernels (check_operands)
#else
    // rows of the cache, as the op indexes them (nb[1] = one state)
    ggml_tensor * rows = ggml_reshape_2d(ctx, states, row, ggml_nelements(states) / row);
    ggml_tensor * args[] = {q, k, v, g, beta, rows, cells};
    ggml_tensor * out = ggml_custom_4d(ctx, GGML_TYPE_F32, S * H, T * B + K * S * B, 1, 1, args, cells ? 7 : 6,
                                       sum_order() == SumOrder::avx512 ? delta_rule_in_place_op<true>
                                                                       : delta_rule_in_place_op<false>,
                                       GGML_N_TASKS_MAX, (void *) (intptr_t) K);
    ggml_set_name(out, kOpName);
    return out;
#endif
}

bool is_delta_rule(const ggml_tensor * node) {
    return node->op == GGML_OP_CUSTOM && std::strcmp(node->name, kOpName) == 0;
}

}  // namespace glm5next
