#include "testing/helpers.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <initializer_list>
#include <utility>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"
#include "graph/concat_ops.h"
#include "graph/delta_rule_ops.h"
#include "graph/float_rows_ops.h"
#include "graph/mhc_ops.h"
#include "graph/norm_ops.h"
#include "graph/q8_0_rows_ops.h"
#include "runtime/graph_slot.h"

namespace glm5next {

namespace {

// Metadata-only context: tensor data lives in the backend buffer that gallocr allocates.
ggml_context_ptr metadata_context(int n_tensors) {
    const ggml_init_params params = {ggml_tensor_overhead() * n_tensors + ggml_graph_overhead(), nullptr, true};
    ggml_context_ptr ctx(ggml_init(params));
    if (!ctx) throw std::runtime_error("ggml_init failed");
    return ctx;
}

// Computes the graph of `out` on the CPU backend with n_threads (0: all cores), `reps` times: inputs are copied in
// from `inputs` (tensor, data) pairs, and `out` (of the last run) is copied to `result`, and each tensor of `read` (an
// input an op wrote in place) to its data. Returns the fastest run's seconds.
double compute_on_cpu(ggml_tensor * out, const std::vector<std::pair<ggml_tensor *, const void *>> & inputs,
                      float * result, ggml_context * ctx, int n_threads = 0, int reps = 1,
                      std::initializer_list<std::pair<ggml_tensor *, float *>> read = {}) {
    ggml_set_output(out);
    for (const auto & [t, data] : read) ggml_set_output(t);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_backend_ptr backend(ggml_backend_cpu_init());
    if (!backend) throw std::runtime_error("ggml_backend_cpu_init failed");
    const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ggml_backend_cpu_set_n_threads(backend.get(), n_threads > 0 ? n_threads : all);
    ggml_gallocr_ptr galloc(ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend.get())));
    if (!galloc || !ggml_gallocr_alloc_graph(galloc.get(), gf)) {
        throw std::runtime_error("ggml graph allocation failed");
    }
    for (const auto & [t, data] : inputs) ggml_backend_tensor_set(t, data, 0, ggml_nbytes(t));
    double best = 0.0;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (ggml_backend_graph_compute(backend.get(), gf) != GGML_STATUS_SUCCESS) {
            throw std::runtime_error("ggml graph compute failed");
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = i == 0 ? seconds : std::min(best, seconds);
    }
    ggml_backend_tensor_get(out, result, 0, ggml_nbytes(out));
    for (const auto & [t, data] : read) ggml_backend_tensor_get(t, data, 0, ggml_nbytes(t));
    return best;
}

}  // namespace

void matmul_f32(const float *a, const float *b, float *out, int64_t m, int64_t k, int64_t n) {
    // ggml aborts the process on bad shapes, so reject them before building the graph.
    if (m < 1 || k < 1 || n < 1) {
        throw std::invalid_argument("matmul_f32: all dimensions must be >= 1");
    }
    ggml_context_ptr ctx = metadata_context(8);
    // ggml's ne[0] is the contiguous (column) dimension, so a row-major r x c
    // matrix is a tensor with ne = {c, r}.
    ggml_tensor *ta = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, k, m);
    ggml_tensor *tb = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n, k);
    ggml_set_input(ta);
    ggml_set_input(tb);
    // ggml_mul_mat(x, y) = y @ x^T with both operands k-contiguous, so feed it
    // b^T (n x k, made contiguous in the graph) to get a @ b with ne = {n, m}.
    ggml_tensor *tbt = ggml_cont(ctx.get(), ggml_transpose(ctx.get(), tb));
    compute_on_cpu(ggml_mul_mat(ctx.get(), tbt, ta), {{ta, a}, {tb, b}}, out, ctx.get());
}

void hc_post_f32(const float *x, const float *residual, const float *post, const float *comb, float *out,
                 int64_t n_embd, int64_t hc, int64_t n_tokens, bool ggml_kernel) {
    if (n_embd < 1 || hc < 1 || n_tokens < 1) {
        throw std::invalid_argument("hc_post_f32: all dimensions must be >= 1");
    }
    ggml_context_ptr ctx = metadata_context(8);
    ggml_tensor *tx = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n_embd, n_tokens);
    ggml_tensor *tr = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, n_embd, hc, n_tokens);
    ggml_tensor *tp = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, hc, n_tokens);
    ggml_tensor *tc = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, hc, hc, n_tokens);
    for (ggml_tensor *t : {tx, tr, tp, tc}) ggml_set_input(t);
    ggml_tensor *y = ggml_kernel ? ggml_dsv4_hc_post(ctx.get(), tx, tr, tp, tc) : hc_post_mix(ctx.get(), tx, tr, tp, tc);
    compute_on_cpu(y, {{tx, x}, {tr, residual}, {tp, post}, {tc, comb}}, out, ctx.get());
}

void rows_product_f32(ggml_type type, const float *w, const float *x, const int32_t *ids, float *out, int64_t n_mat,
                      int64_t M, int64_t K, int64_t n_x, int64_t T, int64_t n_used, bool ggml_kernel) {
    if (n_mat < 1 || M < 1 || K < 1 || n_x < 1 || T < 1 || n_used < 1) {
        throw std::invalid_argument("rows_product_f32: all dimensions must be >= 1");
    }
    if (type != GGML_TYPE_Q8_0 && type != GGML_TYPE_F16 && type != GGML_TYPE_F32) {
        throw std::invalid_argument(std::string("rows_product_f32: no few-row kernel for ") + ggml_type_name(type));
    }
    if (type == GGML_TYPE_Q8_0 && K % 32 != 0) throw std::invalid_argument("rows_product_f32: K must be a multiple of 32");
    ggml_context_ptr ctx = metadata_context(8);
    ggml_tensor *tw = ggml_new_tensor_3d(ctx.get(), type, K, M, n_mat);
    ggml_tensor *tx = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, K, n_x, T);
    ggml_tensor *tids = ids ? ggml_new_tensor_2d(ctx.get(), GGML_TYPE_I32, n_used, T) : nullptr;
    for (ggml_tensor *t : {tw, tx, tids}) {
        if (t) ggml_set_input(t);
    }
    std::vector<uint8_t> wt(type == GGML_TYPE_F32 ? 0 : ggml_nbytes(tw));  // w in its type
    if (type == GGML_TYPE_Q8_0) ggml_quantize_chunk(GGML_TYPE_Q8_0, w, wt.data(), 0, n_mat * M, K, nullptr);
    if (type == GGML_TYPE_F16) ggml_fp32_to_fp16_row(w, (ggml_fp16_t *) wt.data(), n_mat * M * K);
    const float *wdata = type == GGML_TYPE_F32 ? w : (const float *) wt.data();
    ggml_tensor *y;
    if (ggml_kernel) {
        y = ids ? ggml_mul_mat_id(ctx.get(), tw, tx, tids) : ggml_mul_mat(ctx.get(), tw, tx);
    } else {
        y = type == GGML_TYPE_Q8_0 ? q8_0_mul_mat_rows(ctx.get(), tw, tx, tids) : float_mul_mat_rows(ctx.get(), tw, tx, tids);
    }
    if (ids) {
        compute_on_cpu(y, {{tw, wdata}, {tx, x}, {tids, (const float *) ids}}, out, ctx.get());
    } else {
        compute_on_cpu(y, {{tw, wdata}, {tx, x}}, out, ctx.get());
    }
}

void one_slot_two_graphs(const float *x, float *out_a, float *out_b, int64_t n) {
    if (n < 1) throw std::invalid_argument("one_slot_two_graphs: n must be >= 1");
    ggml_backend_ptr cpu(ggml_backend_cpu_init());
    if (!cpu) throw std::runtime_error("ggml_backend_cpu_init failed");
    std::vector<ggml_backend_t> backends{cpu.get()};
    BufferEpoch epoch;
    const CpuPins pins;
    GraphSlot slot(backends, cpu.get(), 16, epoch, pins);
    for (const bool b : {false, true}) {
        ggml_tensor * in = nullptr;
        ggml_tensor * out = nullptr;
        auto build = [&](TrunkGraph & g, ggml_context * ctx) {
            in = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
            ggml_set_input(in);
            ggml_tensor * x2 = ggml_scale(ctx, in, 2.0f);
            ggml_tensor * x30 = ggml_scale(ctx, ggml_scale(ctx, x2, 3.0f), 5.0f);
            out = b ? ggml_add(ctx, x2, x30) : ggml_add(ctx, x30, x30);
            ggml_set_output(out);
            g.gf = ggml_new_graph_custom(ctx, 16, false);
            ggml_build_forward_expand(g.gf, out);
        };
        GraphShape shape{GraphShape::kTrunk, {PartShape{}}};
        shape.parts[0].n_rows = b ? 2 : 1;  // another shape: the slot builds b's graph anew
        slot.build<TrunkGraph>(shape, build, false);
        ggml_backend_tensor_set(in, x, 0, ggml_nbytes(in));
        slot.compute(false);
        ggml_backend_tensor_get(out, b ? out_b : out_a, 0, ggml_nbytes(out));
    }
}

// The delta rule's inputs but the state, f32 graph inputs: q, k, v, g [S, H, T, B] and beta [1, H, T, B].
static std::array<ggml_tensor *, 5> delta_rule_inputs(ggml_context * ctx, int64_t S, int64_t H, int64_t T, int64_t B) {
    std::array<ggml_tensor *, 5> t{};
    for (int i = 0; i < 5; ++i) {
        t[i] = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, i == 4 ? 1 : S, H, T, B);
        ggml_set_input(t[i]);
    }
    return t;
}

double delta_rule_f32(const float *q, const float *k, const float *v, const float *g, const float *beta,
                      const float *state, float *out, int64_t S, int64_t H, int64_t T, int64_t B, int64_t K,
                      bool ggml_kernel, int reps, int n_threads) {
    if (S < 1 || H < 1 || T < 1 || B < 1 || K < 1 || reps < 1 || n_threads < 1) {
        throw std::invalid_argument("delta_rule_f32: all dimensions, reps and n_threads must be >= 1");
    }
    ggml_context_ptr ctx = metadata_context(16);
    const auto [tq, tk, tv, tg, tb] = delta_rule_inputs(ctx.get(), S, H, T, B);
    ggml_tensor *ts = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, S, S, H, B);
    ggml_set_input(ts);
    ggml_tensor *y = ggml_kernel ? ggml_gated_delta_net(ctx.get(), tq, tk, tv, tg, tb, ts, K)
                                 : delta_rule(ctx.get(), tq, tk, tv, tg, tb, ts, K);
    return compute_on_cpu(y, {{tq, q}, {tk, k}, {tv, v}, {tg, g}, {tb, beta}, {ts, state}}, out, ctx.get(), n_threads,
                          reps);
}

void delta_rule_in_place_f32(const float *q, const float *k, const float *v, const float *g, const float *beta,
                             float *states, int64_t n_rows, const int32_t *cells, float *out, int64_t S, int64_t H,
                             int64_t T, int64_t B, int64_t K) {
    if (S < 1 || H < 1 || T < 1 || B < 1 || K < 1 || n_rows < 1) {
        throw std::invalid_argument("delta_rule_in_place_f32: all dimensions and n_rows must be >= 1");
    }
    for (int64_t s = 0; cells != nullptr && s < B; ++s) {
        if (cells[s] < 0 || cells[s] >= n_rows) {
            throw std::invalid_argument("delta_rule_in_place_f32: cell " + std::to_string(cells[s]) +
                                        " outside the states' " + std::to_string(n_rows) + " rows");
        }
    }
    ggml_context_ptr ctx = metadata_context(16);
    const auto [tq, tk, tv, tg, tb] = delta_rule_inputs(ctx.get(), S, H, T, B);
    ggml_tensor *ts = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, S * S * H, n_rows);
    ggml_tensor *tc = cells ? ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, B) : nullptr;
    ggml_set_input(ts);
    if (tc) ggml_set_input(tc);
    ggml_tensor *y = delta_rule_in_place(ctx.get(), tq, tk, tv, tg, tb, ts, tc, K);
    std::vector<std::pair<ggml_tensor *, const void *>> inputs = {{tq, q}, {tk, k}, {tv, v}, {tg, g}, {tb, beta},
                                                                  {ts, states}};
    if (tc) inputs.emplace_back(tc, cells);
    compute_on_cpu(y, inputs, out, ctx.get(), 2, 1, {{ts, states}});
}

void concat_pieces_f32(const std::vector<const float *> & pieces, const std::vector<std::array<int64_t, 4>> & ne,
                       const std::vector<bool> & transposed, int dim, float * out, bool ggml_kernel, int n_threads) {
    if (pieces.empty() || ne.size() != pieces.size() || transposed.size() != pieces.size()) {
        throw std::invalid_argument("concat_pieces_f32: one ne and one transposed flag per piece, one piece at least");
    }
    ggml_context_ptr ctx = metadata_context(4 * (int) pieces.size() + 8);
    std::vector<ggml_tensor *> views;
    std::vector<std::pair<ggml_tensor *, const void *>> inputs;
    for (size_t p = 0; p < pieces.size(); ++p) {
        const auto & n = ne[p];
        ggml_tensor * t = transposed[p] ? ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, n[1], n[0], n[2], n[3])
                                        : ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, n[0], n[1], n[2], n[3]);
        ggml_set_input(t);
        inputs.emplace_back(t, pieces[p]);
        views.push_back(transposed[p] ? ggml_transpose(ctx.get(), t) : t);
    }
    ggml_tensor * y = views[0];
    if (!ggml_kernel) {
        y = concat_f32(ctx.get(), views, dim);
    } else {
        for (size_t p = 1; p < views.size(); ++p) y = ggml_concat(ctx.get(), y, views[p], dim);
    }
    if (y == views[0]) y = ggml_cont(ctx.get(), y);  // one piece: the graph needs a node
    compute_on_cpu(y, inputs, out, ctx.get(), n_threads);
}

void norm_rows_f32(const float * x, const std::array<int64_t, 4> & ne, int64_t row_stride, const float * w, int64_t n_w,
                   float eps, bool l2, float * out, bool ggml_kernel, int n_threads) {
    if (row_stride < ne[0]) throw std::invalid_argument("norm_rows_f32: row_stride < ne0");
    ggml_context_ptr ctx = metadata_context(8);
    // the rows ne[1] * ne[2] * ne[3] of row_stride values each; x their first ne[0] values
    ggml_tensor * whole = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, row_stride, ne[1] * ne[2] * ne[3]);
    ggml_set_input(whole);
    std::vector<std::pair<ggml_tensor *, const void *>> inputs = {{whole, x}};
    const size_t rb = row_stride * sizeof(float);
    ggml_tensor * tx = ggml_view_4d(ctx.get(), whole, ne[0], ne[1], ne[2], ne[3], rb, rb * ne[1], rb * ne[1] * ne[2], 0);
    ggml_tensor * tw = nullptr;
    if (w != nullptr) {
        tw = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, n_w);
        ggml_set_input(tw);
        inputs.emplace_back(tw, w);
    }
    static float eps_value;  // the op reads eps through a pointer when the graph runs
    eps_value = eps;
    ggml_tensor * y;
    if (!ggml_kernel) {
        y = l2 ? l2_norm_f32(ctx.get(), tx) : rms_norm_f32(ctx.get(), tx, tw, &eps_value);
    } else if (l2) {
        y = ggml_scale(ctx.get(), ggml_rms_norm(ctx.get(), tx, l2_norm_eps(ne[0])), l2_norm_scale(ne[0]));
    } else {
        y = ggml_rms_norm(ctx.get(), tx, eps);
        if (tw) y = ggml_mul(ctx.get(), y, tw);
    }
    compute_on_cpu(y, inputs, out, ctx.get(), n_threads);
}

}  // namespace glm5next
