// Python module glm5next_runtime._testing: test helpers that are not part of the product (built only with
// -DGLM5NEXT_TEST_HELPERS=ON, which scripts/setup.sh sets for the development environment).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "graph/delta_rule_ops.h"
#include "graph/float_rows_ops.h"
#include "graph/q8_0_rows_ops.h"
#include "model/kernel_limits.h"
#include "testing/helpers.h"

namespace py = pybind11;

// c_style: non-contiguous inputs are copied to row-major. No forcecast, so
// float64 input is rejected (TypeError) instead of silently losing precision.
using f32_array = py::array_t<float, py::array::c_style>;

static py::array_t<float> matmul(const f32_array &a, const f32_array &b) {
    if (a.ndim() != 2 || b.ndim() != 2) {
        throw std::invalid_argument("matmul: a and b must be 2-D, got ndim " + std::to_string(a.ndim()) +
                                    " and " + std::to_string(b.ndim()));
    }
    const auto m = a.shape(0), k = a.shape(1), n = b.shape(1);
    if (b.shape(0) != k) {
        throw std::invalid_argument("matmul: inner dimensions differ: a is (" + std::to_string(m) + ", " +
                                    std::to_string(k) + "), b is (" + std::to_string(b.shape(0)) + ", " +
                                    std::to_string(n) + ")");
    }
    py::array_t<float> out({m, n});
    const float *pa = a.data();
    const float *pb = b.data();
    float *pout = out.mutable_data();
    {
        // Only raw buffers are touched while computing; let other threads run.
        py::gil_scoped_release release;
        glm5next::matmul_f32(pa, pb, pout, m, k, n);
    }
    return out;
}

static py::array_t<float> hc_post(const f32_array &x, const f32_array &residual, const f32_array &post,
                                  const f32_array &comb, bool ggml_kernel) {
    if (x.ndim() != 2 || residual.ndim() != 3 || post.ndim() != 2 || comb.ndim() != 3) {
        throw std::invalid_argument("hc_post: x, residual, post, comb must be 2-D, 3-D, 2-D, 3-D");
    }
    const auto T = x.shape(0), n_embd = x.shape(1), hc = residual.shape(1);
    if (residual.shape(0) != T || residual.shape(2) != n_embd || post.shape(0) != T || post.shape(1) != hc ||
        comb.shape(0) != T || comb.shape(1) != hc || comb.shape(2) != hc) {
        throw std::invalid_argument("hc_post: shapes must be x (T, n_embd), residual (T, hc, n_embd), post (T, hc), "
                                    "comb (T, hc, hc)");
    }
    py::array_t<float> out({T, hc, n_embd});
    const float *px = x.data(), *pr = residual.data(), *pp = post.data(), *pc = comb.data();
    float *pout = out.mutable_data();
    {
        py::gil_scoped_release release;
        glm5next::hc_post_f32(px, pr, pp, pc, pout, n_embd, hc, T, ggml_kernel);
    }
    return out;
}

// The product of a few-row kernel (rows_product_f32) on numpy arrays; `name` is the binding's, for errors.
static py::array_t<float> rows_product(const char *name, ggml_type type, const f32_array &w, const f32_array &x,
                                       const std::optional<py::array_t<int32_t, py::array::c_style>> &ids,
                                       bool ggml_kernel) {
    if (w.ndim() != 3 || x.ndim() != 3 || (ids && ids->ndim() != 2)) {
        throw std::invalid_argument(std::string(name) + ": w must be 3-D (n_mat, M, K), x 3-D (T, n, K), ids 2-D (T, n_used)");
    }
    const auto n_mat = w.shape(0), M = w.shape(1), K = w.shape(2), T = x.shape(0), n_x = x.shape(1);
    if (x.shape(2) != K || (ids && ids->shape(0) != T) || (!ids && n_mat != 1)) {
        throw std::invalid_argument(std::string(name) + ": x (T, n, K) must share w's K, ids (T, n_used) x's T; "
                                    "without ids w holds one matrix");
    }
    const auto n_used = ids ? ids->shape(1) : n_x;
    py::array_t<float> out({T, n_used, M});
    const float *pw = w.data(), *px = x.data();
    const int32_t *pids = ids ? ids->data() : nullptr;
    float *pout = out.mutable_data();
    {
        py::gil_scoped_release release;
        glm5next::rows_product_f32(type, pw, px, pids, pout, n_mat, M, K, n_x, T, n_used, ggml_kernel);
    }
    return out;
}

// "f16" or "f32" as a ggml type; ValueError naming `name` for anything else.
static ggml_type float_weight_type(const char *name, const std::string &weight_type) {
    if (weight_type != "f16" && weight_type != "f32") {
        throw std::invalid_argument(std::string(name) + ": weight_type must be \"f16\" or \"f32\", got \"" +
                                    weight_type + "\"");
    }
    return weight_type == "f16" ? GGML_TYPE_F16 : GGML_TYPE_F32;
}

// A ggml type by its name ("q8_0", "f32", ...); ValueError naming `name` for an unknown one.
static ggml_type ggml_type_named(const char *name, const std::string &type_name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char *n = ggml_type_name((ggml_type) t);
        if (ggml_blck_size((ggml_type) t) > 0 && n != nullptr && type_name == n) return (ggml_type) t;
    }
    throw std::invalid_argument(std::string(name) + ": unknown ggml type \"" + type_name + "\"");
}

PYBIND11_MODULE(_testing, mod) {
    mod.doc() = "Test helpers of glm5next_runtime: single ggml kernels on numpy arrays.";

    mod.def("matmul", &matmul, py::arg("a"), py::arg("b"),
            R"doc(Matrix product a @ b (numpy semantics) computed by a ggml graph on the CPU backend.

Args:
    a: float32 array of shape (m, k).
    b: float32 array of shape (k, n).

Returns:
    float32 array of shape (m, n).

Raises:
    ValueError: a or b is not 2-D, the inner dimensions differ, or a dimension is 0.
    TypeError: an input is not convertible to float32 without loss (e.g. float64).
    RuntimeError: ggml failed to allocate or compute the graph.
)doc");

    mod.def("hc_post", &hc_post, py::arg("x"), py::arg("residual"), py::arg("post"), py::arg("comb"),
            py::arg("ggml_kernel") = false,
            R"doc(The mHC post-mix of the trunk graph (csrc/graph/mhc_ops.h) on float32 arrays, for tests:
out[t, d] = x[t] * post[t, d] + sum_s residual[t, s] * comb[t, s, d].

Args:
    x: (T, n_embd); residual: (T, hc, n_embd); post: (T, hc); comb: (T, hc, hc), comb[t, s, d] the weight of
        stream s in output stream d.
    ggml_kernel: run ggml's DSV4_HC_POST instead of ours.

Returns:
    float32 array (T, hc, n_embd).

Raises:
    ValueError: shapes that do not fit; TypeError: inputs not convertible to float32 without loss.
)doc");

    mod.def("q8_0_product",
            [](const f32_array &w, const f32_array &x,
               const std::optional<py::array_t<int32_t, py::array::c_style>> &ids, bool ggml_kernel) {
                return rows_product("q8_0_product", GGML_TYPE_Q8_0, w, x, ids, ggml_kernel);
            },
            py::arg("w"), py::arg("x"), py::arg("ids") = py::none(),
            py::arg("ggml_kernel") = false,
            R"doc(The product of q8_0 matrices with float32 rows by this project's few-row kernel
(csrc/graph/q8_0_rows_ops.h) or by ggml's, for tests: out[t, j] = w[ids[t, j]] @ x[t, j % n], or w[0] @ x[t, j]
without ids. w is quantized to q8_0 first (ggml_quantize_chunk).

Args:
    w: float32 (n_mat, M, K), K a multiple of 32; x: float32 (T, n, K); ids: int32 (T, n_used), each in [0, n_mat).
    ggml_kernel: ggml's product instead (ggml_mul_mat_id with ids, else ggml_mul_mat).

Returns:
    float32 array (T, n_used or n, M).

Raises:
    ValueError: shapes that do not fit; TypeError: inputs not convertible without loss.
    RuntimeError: ggml failed to allocate or compute the graph.
)doc");

    mod.def("float_product",
            [](const f32_array &w, const f32_array &x,
               const std::optional<py::array_t<int32_t, py::array::c_style>> &ids, const std::string &weight_type,
               bool ggml_kernel) {
                return rows_product("float_product", float_weight_type("float_product", weight_type), w, x, ids,
                                    ggml_kernel);
            },
            py::arg("w"), py::arg("x"), py::arg("ids") = py::none(),
            py::arg("weight_type") = "f16", py::arg("ggml_kernel") = false,
            R"doc(The product of f16 or f32 matrices with float32 rows by this project's few-row kernel
(csrc/graph/float_rows_ops.h) or by ggml's, for tests: out[t, j] = w[ids[t, j]] @ x[t, j % n], or w[0] @ x[t, j]
without ids. With weight_type "f16", w is rounded to f16 first (ggml_fp32_to_fp16_row).

Args:
    w: float32 (n_mat, M, K) (for "f32", K a multiple of 64); x: float32 (T, n, K); ids: int32 (T, n_used), each in
    [0, n_mat). weight_type: "f16" or "f32". ggml_kernel: ggml's product instead (ggml_mul_mat_id with ids, else
    ggml_mul_mat).

Returns:
    float32 array (T, n_used or n, M).

Raises:
    ValueError: shapes or a weight_type that do not fit, or a CPU the kernel does not run on; TypeError: inputs not
    convertible without loss. RuntimeError: ggml failed to allocate or compute the graph.
)doc");

    mod.def("float_rows_kernel_available", [](const std::string &weight_type) {
                return glm5next::float_rows_kernel_available(float_weight_type("float_rows_kernel_available", weight_type));
            },
            py::arg("weight_type"),
            "Whether this CPU runs the few-row f16 / f32 kernel (AVX-512 F or AVX2, checked against ggml's vec_dot "
            "bit for bit). ValueError for a weight_type other than \"f16\" or \"f32\".");

    mod.def("float_rows_kernel_isa", [](const std::string &weight_type) {
                return std::string(glm5next::float_rows_kernel_isa(float_weight_type("float_rows_kernel_isa", weight_type)));
            },
            py::arg("weight_type"),
            "The few-row f16 / f32 kernel's instruction set here: \"avx512f\", \"avx2\" or \"\" (none runs). "
            "ValueError for a weight_type other than \"f16\" or \"f32\".");

    mod.def("q8_0_rows_kernel_available", &glm5next::q8_0_rows_kernel_available,
            "Whether this CPU runs the few-row q8_0 kernel (AVX-512 VNNI or AVX2, checked against ggml's vec_dot bit "
            "for bit).");

    mod.def("delta_rule_kernel_available", &glm5next::delta_rule_kernel_available,
            "Whether this CPU runs this project's gated delta rule op (AVX2 and FMA, checked against ggml's "
            "gated_delta_net bit for bit).");

    mod.def("q8_0_rows_kernel_isa", &glm5next::q8_0_rows_kernel_isa,
            "The few-row q8_0 kernel's instruction set here: \"avx512vnni\", \"avx2\" (also on an AVX-512 CPU with "
            "GLM5NEXT_CPU_KERNELS=avx2 in the environment) or \"\" (none runs). ValueError for another value of that "
            "variable than \"native\" or \"avx2\".");

    mod.def("one_slot_two_graphs",
            [](const f32_array &x) {
                if (x.ndim() != 1) throw std::invalid_argument("one_slot_two_graphs: x must be 1-D");
                py::array_t<float> a(x.shape(0)), b(x.shape(0));
                glm5next::one_slot_two_graphs(x.data(), a.mutable_data(), b.mutable_data(), x.shape(0));
                return py::make_tuple(a, b);
            },
            py::arg("x"),
            R"doc(Two graphs allocated in turn in one graph slot (csrc/runtime/graph_slot.h) on the CPU backend, for
tests: a = 2 * ((2x * 3) * 5), in which each tensor is used once, then b = 2x + (2x * 3) * 5, in which 2x lives until
the end, with as many nodes and leafs as a's graph, of the same sizes.

Args:
    x: float32 (n,).

Returns:
    (a, b): float32 arrays (n,).

Raises:
    ValueError: x not 1-D. RuntimeError: ggml failed to allocate or compute a graph.
)doc");

    mod.def("delta_rule",
            [](const f32_array &q, const f32_array &k, const f32_array &v, const f32_array &g, const f32_array &beta,
               const f32_array &state, int64_t K, bool ggml_kernel, int reps, int n_threads) {
                if (q.ndim() != 4 || state.ndim() != 4 || beta.ndim() != 3) {
                    throw std::invalid_argument("delta_rule: q, k, v, g must be 4-D (B, T, H, S), beta 3-D (B, T, H), "
                                                "state 4-D (B, H, S, S)");
                }
                const auto B = q.shape(0), T = q.shape(1), H = q.shape(2), S = q.shape(3);
                for (const f32_array *a : {&k, &v, &g}) {
                    if (a->ndim() != 4 || a->shape(0) != B || a->shape(1) != T || a->shape(2) != H || a->shape(3) != S) {
                        throw std::invalid_argument("delta_rule: k, v, g must have q's shape (B, T, H, S)");
                    }
                }
                if (beta.shape(0) != B || beta.shape(1) != T || beta.shape(2) != H || state.shape(0) != B ||
                    state.shape(1) != H || state.shape(2) != S || state.shape(3) != S) {
                    throw std::invalid_argument("delta_rule: beta must be (B, T, H), state (B, H, S, S)");
                }
                py::array_t<float> out(T * B * S * H + K * B * H * S * S);
                double seconds;
                {
                    py::gil_scoped_release release;
                    seconds = glm5next::delta_rule_f32(q.data(), k.data(), v.data(), g.data(), beta.data(),
                                                       state.data(), out.mutable_data(), S, H, T, B, K, ggml_kernel,
                                                       reps, n_threads);
                }
                return py::make_tuple(out, seconds);
            },
            py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"), py::arg("beta"), py::arg("state"), py::arg("K") = 1,
            py::arg("ggml_kernel") = false, py::arg("reps") = 1, py::arg("n_threads") = 2,
            R"doc(KDA's gated delta rule by this project's op (csrc/graph/delta_rule_ops.h) or by ggml's
gated_delta_net, for tests and timing.

Args:
    q, k, v, g: float32 (B, T, H, S); beta: float32 (B, T, H); state: float32 (B, H, S, S), head h's row j being
    column j of its state matrix. K: snapshot slots. ggml_kernel: ggml's op instead. reps: runs of the graph (the
    fastest is timed). n_threads: CPU threads.

Returns:
    (out, seconds): out float32 (T * B * S * H + K * B * H * S * S,), the op's result (outputs of every sequence, token
    and head, then K slots of B * H states), and the fastest run's seconds.

Raises:
    ValueError: shapes that do not fit, or this project's op not available here. RuntimeError: ggml failed.
)doc");

    mod.def("norm_rows",
            [](const f32_array &x, std::optional<f32_array> w, float eps, bool l2, int64_t n0_given, bool ggml_kernel,
               int n_threads) {
                if (x.ndim() != 4) throw std::invalid_argument("norm_rows: x must be 4-D (ne3, ne2, ne1, row_stride)");
                const int64_t stride = x.shape(3), n0 = n0_given > 0 ? n0_given : stride;
                if (n0 > stride) throw std::invalid_argument("norm_rows: n0 is x's last axis or less");
                const std::array<int64_t, 4> ne = {n0, x.shape(2), x.shape(1), x.shape(0)};
                py::array_t<float> out({ne[3], ne[2], ne[1], ne[0]});
                {
                    py::gil_scoped_release release;
                    glm5next::norm_rows_f32(x.data(), ne, stride, w ? w->data() : nullptr, w ? w->size() : 0, eps, l2,
                                            out.mutable_data(), ggml_kernel, n_threads);
                }
                return out;
            },
            py::arg("x"), py::arg("w") = py::none(), py::arg("eps") = 1e-6f, py::arg("l2") = false,
            py::arg("n0") = 0, py::arg("ggml_kernel") = false, py::arg("n_threads") = 2,
            R"doc(RMSNorm of x's rows times w by this project's op (csrc/graph/norm_ops.h, rms_norm_f32), or with l2 KDA's
L2 normalization (l2_norm_f32), or the same by ggml's RMS_NORM, MUL and SCALE (ggml_kernel), on the CPU, for tests.

Args:
    x: float32 (ne3, ne2, ne1, S); n0: the rows' size, the first n0 of each S values (0: S; n0 < S reads rows
    that are not contiguous with each other, as a view's); w: None or float32 values, one per row value (the op
    refuses another count); eps: RMSNorm's (l2 takes its own); n_threads: the CPU backend's threads.

Returns:
    float32 (ne3, ne2, ne1, n0).

Raises:
    ValueError: x not 4-D, n0 past S, or w of another size than n0 (the op's error). RuntimeError: ggml failed.
)doc");

    mod.def("ggml_log",
            [](const std::string &level, const std::string &text) {
                static const std::map<std::string, ggml_log_level> levels = {
                    {"debug", GGML_LOG_LEVEL_DEBUG}, {"info", GGML_LOG_LEVEL_INFO}, {"warn", GGML_LOG_LEVEL_WARN},
                    {"error", GGML_LOG_LEVEL_ERROR}, {"cont", GGML_LOG_LEVEL_CONT}};
                const auto it = levels.find(level);
                if (it == levels.end()) {
                    throw std::invalid_argument("ggml_log: level \"" + level + "\" is not debug, info, warn, error or cont");
                }
                ggml_log_callback callback = nullptr;
                void *user_data = nullptr;
                ggml_log_get(&callback, &user_data);
                callback(it->second, text.c_str(), user_data);
            },
            py::arg("level"), py::arg("text"),
            R"doc(Hands `text` to ggml's current log callback at `level` (debug, info, warn, error or cont), as ggml's
own code logs, for tests of the filter the native module installs (csrc/runtime/ggml_log.h).

Raises:
    ValueError: an unknown level.
)doc");

    mod.def("concat",
            [](const std::vector<f32_array> &pieces, int dim, std::optional<std::vector<bool>> transposed,
               bool ggml_kernel, int n_threads) {
                if (dim < 0 || dim > 3) throw std::invalid_argument("concat: dim must be 0..3 (ggml's order)");
                std::vector<const float *> data;
                std::vector<std::array<int64_t, 4>> ne;
                std::vector<bool> tr = transposed.value_or(std::vector<bool>(pieces.size(), false));
                if (tr.size() != pieces.size()) throw std::invalid_argument("concat: one transposed flag per piece");
                std::array<int64_t, 4> out_ne{};
                for (size_t p = 0; p < pieces.size(); ++p) {
                    const f32_array &a = pieces[p];
                    if (a.ndim() != 4) throw std::invalid_argument("concat: pieces must be 4-D (ne3, ne2, ne1, ne0)");
                    std::array<int64_t, 4> n = {a.shape(3), a.shape(2), a.shape(1), a.shape(0)};
                    if (tr[p]) std::swap(n[0], n[1]);  // stored (ne3, ne2, ne0, ne1): the piece is its transpose
                    ne.push_back(n);
                    data.push_back(a.data());
                    for (int d = 0; d < 4; ++d) out_ne[d] = p == 0 || d != dim ? n[d] : out_ne[d] + n[d];
                }
                if (pieces.empty()) throw std::invalid_argument("concat: no pieces");
                py::array_t<float> out({out_ne[3], out_ne[2], out_ne[1], out_ne[0]});
                {
                    py::gil_scoped_release release;
                    glm5next::concat_pieces_f32(data, ne, tr, dim, out.mutable_data(), ggml_kernel, n_threads);
                }
                return out;
            },
            py::arg("pieces"), py::arg("dim"), py::arg("transposed") = py::none(), py::arg("ggml_kernel") = false,
            py::arg("n_threads") = 2,
            R"doc(Pieces joined along ggml dimension `dim` by this project's op (csrc/graph/concat_ops.h, concat_f32) or
by ggml_concat's chain (ggml_kernel), on the CPU, for tests.

Args:
    pieces: float32 arrays (ne3, ne2, ne1, ne0), equal but in dimension `dim` (ggml's order: 0 is the last axis);
    transposed[p]: piece p is given stored as (ne3, ne2, ne0, ne1) and joined through ggml_transpose (rows that are
    not contiguous). n_threads: the CPU backend's threads.

Returns:
    float32 (ne3, ne2, ne1, ne0) of the result.

Raises:
    ValueError: pieces that do not fit (the op's message). RuntimeError: ggml failed.
)doc");

    mod.def("delta_rule_in_place",
            [](const f32_array &q, const f32_array &k, const f32_array &v, const f32_array &g, const f32_array &beta,
               const f32_array &states, std::optional<std::vector<int32_t>> cells, int64_t K) {
                if (q.ndim() != 4 || beta.ndim() != 3 || states.ndim() != 4) {
                    throw std::invalid_argument("delta_rule_in_place: q, k, v, g must be 4-D (B, T, H, S), beta 3-D "
                                                "(B, T, H), states 4-D (rows, H, S, S)");
                }
                const auto B = q.shape(0), T = q.shape(1), H = q.shape(2), S = q.shape(3), rows = states.shape(0);
                for (const f32_array *a : {&k, &v, &g}) {
                    if (a->ndim() != 4 || a->shape(0) != B || a->shape(1) != T || a->shape(2) != H || a->shape(3) != S) {
                        throw std::invalid_argument("delta_rule_in_place: k, v, g must have q's shape (B, T, H, S)");
                    }
                }
                if (beta.shape(0) != B || beta.shape(1) != T || beta.shape(2) != H || states.shape(1) != H ||
                    states.shape(2) != S || states.shape(3) != S) {
                    throw std::invalid_argument("delta_rule_in_place: beta must be (B, T, H), states (rows, H, S, S)");
                }
                if (cells && (int64_t) cells->size() != B) {
                    throw std::invalid_argument("delta_rule_in_place: one cell per sequence (B)");
                }
                py::array_t<float> out(T * B * S * H + K * B * H * S * S);
                py::array_t<float> after({rows, (py::ssize_t) H, (py::ssize_t) S, (py::ssize_t) S});
                std::copy(states.data(), states.data() + states.size(), after.mutable_data());
                {
                    py::gil_scoped_release release;
                    glm5next::delta_rule_in_place_f32(q.data(), k.data(), v.data(), g.data(), beta.data(),
                                                      after.mutable_data(), rows, cells ? cells->data() : nullptr,
                                                      out.mutable_data(), S, H, T, B, K);
                }
                return py::make_tuple(out, after);
            },
            py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"), py::arg("beta"), py::arg("states"),
            py::arg("cells") = py::none(), py::arg("K") = 1,
            R"doc(KDA's gated delta rule by this project's op on states kept in a cache (csrc/graph/delta_rule_ops.h,
delta_rule_in_place), for tests.

Args:
    q, k, v, g: float32 (B, T, H, S); beta: float32 (B, T, H); states: float32 (rows, H, S, S), the cache: sequence
    b's state in row cells[b] (cells None: row b). K: snapshot slots.

Returns:
    (out, states_after): out float32 as delta_rule's (slot 0 unwritten: its values are the buffer's), and the cache
    after the op, each sequence's row holding its state after the last token, the other rows as they were.

Raises:
    ValueError: shapes that do not fit, a cell outside the rows, or the op not available here. RuntimeError: ggml
    failed.
)doc");

    mod.def("cuda_mul_mat_id_needs_sync",
            [](const std::string &weight_type, int64_t k, int64_t m, int64_t n_experts, int64_t n_used, int64_t n_rows,
               int cc) {
                const ggml_type type = ggml_type_named("cuda_mul_mat_id_needs_sync", weight_type);
                if (k < 1 || m < 1 || n_experts < 1 || n_used < 1 || n_used > n_experts || n_rows < 1 ||
                    k % ggml_blck_size(type) != 0) {
                    throw std::invalid_argument("cuda_mul_mat_id_needs_sync: shapes do not fit (k a multiple of the "
                                                "type's block, 1 <= n_used <= n_experts, n_rows >= 1)");
                }
                ggml_context *ctx = ggml_init({ggml_tensor_overhead() * 8, nullptr, true});
                ggml_tensor *w = ggml_new_tensor_3d(ctx, type, k, m, n_experts);
                ggml_tensor *x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, n_used, n_rows);
                ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_used, n_rows);
                const bool out = glm5next::cuda_mul_mat_id_needs_sync(ggml_mul_mat_id(ctx, w, x, ids), cc);
                ggml_free(ctx);
                return out;
            },
            py::arg("weight_type"), py::arg("k"), py::arg("m"), py::arg("n_experts"), py::arg("n_used"),
            py::arg("n_rows"), py::arg("cc"),
            "Whether ggml-cuda takes its synchronizing MUL_MAT_ID fallback (turning CUDA graphs off) for experts "
            "[k, m, n_experts] of `weight_type` (a ggml type name) applied to n_rows rows of n_used experts each, on "
            "an NVIDIA GPU of compute capability cc (model/kernel_limits.h, the census's rule). ValueError for an "
            "unknown type or shapes that do not fit.");
}
