#include "model/kernel_limits.h"

#include <cstdlib>

#include "model/model.h"

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

bool multiplies_rows_alone(const ggml_tensor * weight) {
    const std::string backend = kernel_backend(device_of(weight));
    return backend == "CPU" || backend == "RPC";
}

namespace {

// The vendored ggml-cuda's constants and thresholds, NVIDIA only (common.cuh, mmvq.cuh/.cu, mmq.cu, mmf.cu/.cuh).
constexpr int kVolta = 700, kTuring = 750, kAmpere = 800, kAda = 890, kPascal = 600, kDp4a = 610;
constexpr int64_t kMmvqMaxBatch = 8;        // MMVQ_MAX_BATCH_SIZE (= MMVF_MAX_BATCH_SIZE)
constexpr int64_t kMmqDp4aMaxBatch = 64;    // MMQ_DP4A_MAX_BATCH_SIZE
constexpr int64_t kMmfRowsPerBlock = 32;    // MMF_ROWS_PER_BLOCK
constexpr int kWarpSize = 32;

bool mmq_type(ggml_type t) {  // ggml_cuda_should_use_mmq's switch
    switch (t) {
        case GGML_TYPE_Q1_0: case GGML_TYPE_Q2_0:
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
        case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S:
        case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ4_NL:
        case GGML_TYPE_MXFP4: case GGML_TYPE_NVFP4:
            return true;
        default:
            return false;
    }
}

// get_mmvq_mmid_max_batch for NVIDIA (mmvq.cu): Volta, Ada and later always 8 rows; Turing and Ampere 8 but for a
// few types; Pascal and older fewer for most.
int64_t mmvq_mmid_max_batch(ggml_type t, int cc) {
    if (cc == kVolta || cc >= kAda) return kMmvqMaxBatch;
    if (cc >= kTuring) {
        switch (t) {
            case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_MXFP4: case GGML_TYPE_Q2_K: return 7;
            case GGML_TYPE_IQ3_S: return 6;
            case GGML_TYPE_Q3_K: return 5;
            default: return kMmvqMaxBatch;
        }
    }
    switch (t) {
        case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ4_NL: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
            return 6;
        case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ4_XS: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
            return 5;
        case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_MXFP4: case GGML_TYPE_NVFP4:
        case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q6_K: case GGML_TYPE_Q8_0:
            return 4;
        default:
            return kMmvqMaxBatch;
    }
}

// ggml_cuda_should_use_mmq for NVIDIA (every such GPU from Pascal on has 48 KiB of shared memory per block).
bool should_use_mmq(ggml_type t, int cc, int64_t ne11, int64_t n_experts) {
    if (!mmq_type(t)) return false;
    if (cc >= kTuring) return true;
    if (cc < kDp4a) return cc >= kPascal && n_experts > 0;
    return cc < kVolta || ne11 < kMmqDp4aMaxBatch;  // !fp16_mma_hardware_available(cc) || ...
}

// ggml_cuda_should_use_mmf for NVIDIA, MUL_MAT_ID's case.
bool should_use_mmf_id(const ggml_tensor * w, int cc, int64_t src1_ncols) {
    if (ggml_is_quantized(w->type)) return false;
    const int64_t ts = (int64_t) ggml_type_size(w->type);
    if (w->ne[0] % (kWarpSize * (4 / ts)) != 0 || (int64_t) w->nb[0] != ts) return false;
    for (int i = 1; i < GGML_MAX_DIMS; ++i) {
        if ((int64_t) w->nb[i] % (2 * ts) != 0) return false;
    }
    if (w->ne[1] % kMmfRowsPerBlock != 0) return false;
    if ((w->ne[1] <= 1024 && src1_ncols > 512) || (w->ne[1] > 1024 && src1_ncols > 128)) return false;
    switch (w->type) {
        case GGML_TYPE_F32: case GGML_TYPE_BF16: return cc >= kAmpere;
        case GGML_TYPE_F16: return cc >= kVolta;
        default: return false;
    }
}

}  // namespace

bool cuda_mul_mat_id_needs_sync(const ggml_tensor * node, int cc) {
    if (node->op != GGML_OP_MUL_MAT_ID) return false;
    const ggml_tensor * w = node->src[0];
    const ggml_tensor * x = node->src[1];
    if (x->type != GGML_TYPE_F32 || node->type != GGML_TYPE_F32) return true;
    if (node->ne[2] <= kMmvqMaxBatch && ggml_is_quantized(w->type) && node->ne[2] <= mmvq_mmid_max_batch(w->type, cc)) {
        return false;
    }
    if (should_use_mmq(w->type, cc, x->ne[2], w->ne[2])) return false;
    return !should_use_mmf_id(w, cc, x->ne[2]);
}

}  // namespace glm5next
