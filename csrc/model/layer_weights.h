// The weights of one block (trunk layer or NextN layer) as ggml tensors, nullptr where the layer kind has none.
#pragma once

#include "ggml.h"

namespace glm5next {

// Weights of one block. Absent tensors are nullptr (e.g. KDA layers have no MLA tensors).
struct LayerWeights {
    ggml_tensor *attn_norm = nullptr, *ffn_norm = nullptr;
    // mHC (trunk only)
    ggml_tensor *hc_attn_fn = nullptr, *hc_attn_base = nullptr, *hc_attn_scale = nullptr;
    ggml_tensor *hc_ffn_fn = nullptr, *hc_ffn_base = nullptr, *hc_ffn_scale = nullptr;
    // KDA
    ggml_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;  // wo is shared with MLA
    ggml_tensor *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr;     // {K, 1, inner, 1}
    ggml_tensor *ssm_f_a = nullptr, *ssm_f_b = nullptr, *ssm_dt_b = nullptr, *ssm_a = nullptr;
    ggml_tensor *ssm_beta = nullptr, *ssm_g_a = nullptr, *ssm_g_b = nullptr, *ssm_norm = nullptr;
    // MLA (DSA)
    ggml_tensor *wq_a = nullptr, *q_a_norm = nullptr, *wq_b = nullptr;
    ggml_tensor *wkv_a = nullptr, *kv_a_norm = nullptr, *wk_b = nullptr, *wv_b = nullptr;
    // indexer ("full" DSA layers and the NextN layer)
    ggml_tensor *idx_q_b = nullptr, *idx_k = nullptr, *idx_k_norm = nullptr, *idx_k_norm_b = nullptr;
    ggml_tensor *idx_proj = nullptr, *idx_gate = nullptr, *idx_ape = nullptr;
    // FFN: dense
    ggml_tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
    // FFN: MoE
    ggml_tensor *gate_inp = nullptr, *exp_probs_b = nullptr;
    ggml_tensor *gate_exps = nullptr, *up_exps = nullptr, *down_exps = nullptr;
    ggml_tensor *gate_shexp = nullptr, *up_shexp = nullptr, *down_shexp = nullptr;
    // NextN
    ggml_tensor *eh_proj = nullptr, *enorm = nullptr, *hnorm = nullptr, *shared_head_norm = nullptr;
    ggml_tensor *nextn_embd = nullptr, *nextn_head = nullptr;  // optional
};

}  // namespace glm5next
