// Shapes a device's ggml kernel cannot take although its backend claims the op (issue 26 item 3): the scheduler
// would put the op there and the kernel would abort the process. Such ops are pinned to the CPU instead, and the
// load report says so (Engine::cpu_pinned_ops).
#pragma once

#include <cstdint>
#include <string>

#include "ggml-backend.h"

namespace glm5next {

// The ggml backend that runs `dev`'s kernels: its registry's name ("CPU", "CUDA", "ROCm", "MUSA", "Vulkan", "Metal",
// ...). ggml's RPC client cannot ask its server which backend serves it (its supports_op answers true for every op),
// so for an RPC device this is the environment's GLM5NEXT_RPC_BACKEND when set (e.g. "CUDA" for rpc-servers on
// NVIDIA GPUs; it applies to every RPC device: one on a CPU is then limited too, which costs splits, not results),
// else "RPC".
std::string kernel_backend(ggml_backend_dev_t dev);

// Whether `backend`'s gated_delta_net kernel (KDA's recurrence) takes a head size of head_dim. ggml-cuda's (also
// built as ROCm and MUSA) is instantiated for 16, 32, 64 and 128 and aborts on another
// (ggml-cuda/gated_delta_net.cu, launch_gated_delta_net) while its supports_op accepts every size. The other
// backends refuse what they cannot run (Vulkan takes the same four sizes, Metal multiples of 32), and the scheduler
// then runs the op on the CPU by itself; the CPU takes any size.
bool runs_gated_delta_net(const std::string & backend, int64_t head_dim);

}  // namespace glm5next
