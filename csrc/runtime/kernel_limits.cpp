#include "runtime/kernel_limits.h"

#include <cstdlib>

namespace glm5next {

std::string kernel_backend(ggml_backend_dev_t dev) {
    const std::string name = ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev));
    if (name.rfind("RPC", 0) == 0) {  // the registry of an RPC server is "RPC[host:port]"
        const char * behind = std::getenv("GLM5NEXT_RPC_BACKEND");
        return behind != nullptr && *behind != '\0' ? std::string(behind) : std::string("RPC");
    }
    return name;
}

bool runs_gated_delta_net(const std::string & backend, int64_t head_dim) {
    if (backend == "CUDA" || backend == "ROCm" || backend == "MUSA") {
        return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
    }
    return true;
}

}  // namespace glm5next
