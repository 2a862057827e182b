// Python module glm5next_runtime._core. Shape/dtype checks happen here so
// that bad input becomes a Python exception instead of a ggml abort.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "smoke.h"

namespace py = pybind11;

void bind_model(py::module_ & mod);   // bind_model.cpp
void bind_engine(py::module_ & mod);  // bind_engine.cpp
void bind_sampling(py::module_ & mod);  // bind_sampling.cpp
void bind_generator(py::module_ & mod);  // bind_generator.cpp

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

PYBIND11_MODULE(_core, mod) {
    mod.doc() = "Native core of glm5next_runtime (ggml via llama-cpp-python's shared libraries).";

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

    mod.def("ggml_version", &glm5next::ggml_version, "Version string of the linked ggml, e.g. '0.25.3'.");
    mod.def("ggml_commit", &glm5next::ggml_commit, "llama.cpp commit the linked ggml was built from.");
    mod.def("system_info", &glm5next::system_info,
            "CPU features of ggml's CPU backend as 'NAME = VALUE | ...' (empty string if unavailable).");

    bind_model(mod);
    bind_engine(mod);
    bind_sampling(mod);
    bind_generator(mod);
}
