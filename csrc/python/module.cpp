// Python module glm5next_runtime._core (typed in glm5next_runtime/_core.pyi). Shape/dtype checks happen here so
// that bad input becomes a Python exception instead of a ggml abort.
#include <pybind11/pybind11.h>

#include "runtime/ggml_log.h"
#include "runtime/system_info.h"

namespace py = pybind11;

void bind_model(py::module_ & mod);   // bind_model.cpp
void bind_engine(py::module_ & mod);  // bind_engine.cpp
void bind_sampling(py::module_ & mod);  // bind_sampling.cpp
void bind_generator(py::module_ & mod);  // bind_generator.cpp
void bind_devices(py::module_ & mod);  // bind_devices.cpp

PYBIND11_MODULE(_core, mod) {
    mod.doc() = "Native core of glm5next_runtime (ggml via llama-cpp-python's shared libraries).";
    glm5next::install_ggml_log_filter();  // ggml's debug lines off stderr (runtime/ggml_log.h)

    mod.def("ggml_version", &glm5next::ggml_version, "Version string of the linked ggml, e.g. '0.25.3'.");
    mod.def("ggml_commit", &glm5next::ggml_commit, "llama.cpp commit the linked ggml was built from.");
    mod.def("system_info", &glm5next::system_info,
            "CPU features of ggml's CPU backend as 'NAME = VALUE | ...' (empty string if unavailable).");

    bind_model(mod);
    bind_engine(mod);
    bind_sampling(mod);
    bind_generator(mod);
    bind_devices(mod);
}
