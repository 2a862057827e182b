// What the few-row product kernels (graph/q8_0_rows_ops.h, graph/float_rows_ops.h) share: their operands as the op
// reads them, the routing of the product's columns to matrices, and the checks of x and ids (besides the weight's
// type), as ggml_mul_mat_id makes them (ggml.c).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "ggml.h"

namespace glm5next {

// x f32 [K, n, T] (K = w's rows' length) with contiguous rows; without ids, w one matrix; with ids, i32 [n_used, T]
// with n_used a multiple of n. Throws std::invalid_argument naming `op` and the operand that does not fit.
void check_rows_operands(const char * op, const ggml_tensor * w, const ggml_tensor * x, const ggml_tensor * ids);

// What one product reads and writes: taken from the op's tensors (of), or from a self-check's buffers.
struct RowsOperands {
    const char * w;       // weight rows of K values, w_nb1 bytes apart, matrices w_nb2 apart
    size_t w_nb1, w_nb2;
    int64_t K, M, n_mat;
    const char * x;       // rows of K values, x_nb1 apart, tokens x_nb2 apart
    size_t x_nb1, x_nb2;
    int64_t x_ne1;
    const char * ids;     // i32 [n_used, T] (ids_nb0, ids_nb1 apart) or null: every column to matrix 0
    size_t ids_nb0, ids_nb1;
    char * out;           // f32 [M, n_used, T]
    size_t out_nb1, out_nb2;
    int64_t n_used, T;

    // Of a custom op's dst with src[0] w, src[1] x and src[2] ids (or null).
    static RowsOperands of(const ggml_tensor * dst);
};

// The product's node: f32 [M, n_used (ids given) or x's n, T] computed by `op` over src w, x and ids (null: none) on
// every thread, named `name` (how is_q8_0_rows and is_float_rows find it).
ggml_tensor * rows_op_node(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids, ggml_custom_op_t op,
                           const char * name);

// Per matrix e, the product's columns (j, t) routed to it (ids[j, t] == e; every column to matrix 0 without ids),
// in order of t then j: cols[e] (cols is resized to at least n_mat entries, the first n_mat cleared first).
using RowsColumns = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
void route_columns(const RowsOperands & o, RowsColumns & cols);

// n rows of K random values for a kernel's check against ggml's vec_dot (q8_0_rows_kernel_available,
// float_rows_kernel_available): normal values, row r scaled by 1 + 3r (rows of several scales), row-major.
std::vector<float> check_rows(std::mt19937 & rng, int64_t n, int64_t K);

}  // namespace glm5next
