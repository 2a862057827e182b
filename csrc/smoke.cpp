#include "smoke.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"

namespace glm5next {

void matmul_f32(const float *a, const float *b, float *out, int64_t m, int64_t k, int64_t n) {
    // ggml aborts the process on bad shapes, so reject them before building the graph.
    if (m < 1 || k < 1 || n < 1) {
        throw std::invalid_argument("matmul_f32: all dimensions must be >= 1");
    }

    // Metadata-only context: tensor data lives in backend buffers (no_alloc).
    const ggml_init_params params = {
        /*.mem_size   =*/ggml_tensor_overhead() * 8 + ggml_graph_overhead(),
        /*.mem_buffer =*/nullptr,
        /*.no_alloc   =*/true,
    };
    ggml_context_ptr ctx(ggml_init(params));
    if (!ctx) throw std::runtime_error("ggml_init failed");

    // ggml's ne[0] is the contiguous (column) dimension, so a row-major r x c
    // matrix is a tensor with ne = {c, r}.
    ggml_tensor *ta = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, k, m);
    ggml_tensor *tb = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n, k);
    ggml_set_input(ta);
    ggml_set_input(tb);
    // ggml_mul_mat(x, y) = y @ x^T with both operands k-contiguous, so feed it
    // b^T (n x k, made contiguous in the graph) to get a @ b with ne = {n, m}.
    ggml_tensor *tbt = ggml_cont(ctx.get(), ggml_transpose(ctx.get(), tb));
    ggml_tensor *tc = ggml_mul_mat(ctx.get(), tbt, ta);
    ggml_set_output(tc);

    ggml_cgraph *gf = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(gf, tc);

    ggml_backend_ptr backend(ggml_backend_cpu_init());
    if (!backend) throw std::runtime_error("ggml_backend_cpu_init failed");
    ggml_backend_cpu_set_n_threads(backend.get(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));

    ggml_gallocr_ptr galloc(ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend.get())));
    if (!galloc || !ggml_gallocr_alloc_graph(galloc.get(), gf)) {
        throw std::runtime_error("ggml graph allocation failed");
    }

    ggml_backend_tensor_set(ta, a, 0, ggml_nbytes(ta));
    ggml_backend_tensor_set(tb, b, 0, ggml_nbytes(tb));
    if (ggml_backend_graph_compute(backend.get(), gf) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("ggml graph compute failed");
    }
    ggml_backend_tensor_get(tc, out, 0, ggml_nbytes(tc));
}

std::string ggml_version() { return ::ggml_version(); }

std::string ggml_commit() { return ::ggml_commit(); }

std::string system_info() {
    // The CPU backend publishes its features through the registry rather than
    // a direct API; this is how llama_print_system_info gets them too.
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    auto get_features = reinterpret_cast<ggml_backend_get_features_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features"));
    if (!get_features) return "";

    std::string info;
    for (ggml_backend_feature *f = get_features(reg); f->name; ++f) {
        if (!info.empty()) info += " | ";
        info += std::string(f->name) + " = " + f->value;
    }
    return info;
}

}  // namespace glm5next
