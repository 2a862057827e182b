// What a device's ggml kernels can and cannot do with this model's ops, read from the backend behind the device:
// shapes a kernel cannot take although its backend claims the op (the scheduler would put the op there and the
// kernel would abort the process: such ops are pinned to the CPU, and the load report says so,
// Engine::cpu_pinned_ops), how products of a few rows are routed there (BlockBuilder::mm), and which nodes turn
// ggml-cuda's CUDA graphs off (the graph census, runtime/graph_census.h).
#pragma once

#include <cstdint>
#include <string>

#include "ggml-backend.h"

namespace glm5next {

// The ggml backend that runs `dev`'s kernels: its registry's name ("CPU", "CUDA", "ROCm", "MUSA", "Vulkan", "Metal",
// ...). ggml's RPC client cannot ask its server which backend serves it (its supports_op answers true for every op),
// so for an RPC device this is the environment's GLM5NEXT_RPC_BACKEND when set (e.g. "CUDA" for rpc-servers on
// NVIDIA GPUs; it applies to every RPC device: one on a CPU is then limited and routed as a GPU, which costs splits
// and the bit-exact batch invariance, not results: the tests' way to run the GPU rules on a CPU), else "RPC".
std::string kernel_backend(ggml_backend_dev_t dev);

// Whether `backend`'s gated_delta_net kernel (KDA's recurrence) takes a head size of head_dim. ggml-cuda's (also
// built as ROCm and MUSA) is instantiated for 16, 32, 64 and 128 and aborts on another
// (ggml-cuda/gated_delta_net.cu, launch_gated_delta_net) while its supports_op accepts every size. The other
// backends refuse what they cannot run (Vulkan takes the same four sizes, Metal multiples of 32), and the scheduler
// then runs the op on the CPU by itself; the CPU takes any size.
bool runs_gated_delta_net(const std::string & backend, int64_t head_dim);

// Whether products of a few rows with `weight` are multiplied each row alone (BlockBuilder::mm's batch-invariant
// route: one matrix as a one-expert MUL_MAT_ID, or this project's rows kernels): where the device holding it runs
// ggml's CPU kernels (kernel_backend "CPU", and "RPC", an RPC server on a CPU), which give a row the bits it has
// alone at the speed of a plain product.
// Elsewhere (GPU backends) plain products: ggml-cuda's one-expert MUL_MAT_ID of a float matrix whose rows are not a
// multiple of 32 takes its synchronizing fallback, which turns CUDA graphs off for the whole step
// (cuda_mul_mat_id_needs_sync), and a GPU's kernels give no row-alone bits either way.
bool multiplies_rows_alone(const ggml_tensor * weight);

// NVIDIA compute capability as ggml-cuda writes it (major * 100 + minor * 10): the census's default is Hopper's
// (H100, H200), the GPUs this project's device checks run on.
constexpr int kCudaCcHopper = 900;

// Whether ggml-cuda (the vendored llama.cpp, 0c1e570: ggml-cuda.cu, ggml_cuda_mul_mat_id_needs_sync) takes its
// synchronizing MUL_MAT_ID fallback for `node` on an NVIDIA GPU of compute capability `cc` built for it: the node then
// turns CUDA-graph capture off for every graph it is in (ggml_cuda_graph_check_compability). Its rule: f32 operands
// and ne2 <= 8 rows with a quantized matrix take MMVQ (Volta, Ada and later always; Turing and Ampere up to a
// per-type row count), a quantized matrix takes MMQ from Turing on, a float matrix takes MMF where its rows are a
// multiple of 32, its row length a multiple of 32 values per 4 bytes, the row counts within its limits and the
// GPU has the type's tensor cores (f32, bf16: Ampere; f16: Volta). Anything else synchronizes. False for a node
// that is not MUL_MAT_ID. AMD's rules (ROCm) are not mirrored.
bool cuda_mul_mat_id_needs_sync(const ggml_tensor * node, int cc);

}  // namespace glm5next
