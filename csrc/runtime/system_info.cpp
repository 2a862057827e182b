#include "runtime/system_info.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

namespace glm5next {

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
