// Smoke-test entry points into ggml: prove that we compile against, link to
// and run the ggml that llama-cpp-python ships. Free of pybind11 so the engine
// can reuse the same code from C++.
#pragma once

#include <cstdint>
#include <string>

namespace glm5next {

// out = a @ b for row-major float32 matrices: a is m x k, b is k x n, out is
// m x n (caller-allocated). Runs a ggml graph (ggml_mul_mat) on the CPU
// backend. Throws std::invalid_argument if a dimension is < 1 and
// std::runtime_error if ggml fails to allocate or compute.
void matmul_f32(const float *a, const float *b, float *out, int64_t m, int64_t k, int64_t n);

// ggml's version string and the llama.cpp commit it was built from.
std::string ggml_version();
std::string ggml_commit();

// The CPU backend's feature flags, e.g. "AVX = 1 | AVX2 = 1 | ...".
std::string system_info();

}  // namespace glm5next
