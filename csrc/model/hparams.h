// Hyper-parameters of a glm5next GGUF (docs/gguf.md, Metadata), after --override-kv.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

struct gguf_context;

namespace glm5next {

// The largest context (n_ctx) and indexer top_k this runtime takes: 2^24 rows, the integers f32 holds exactly
// (graph/select_std.h computes pool and row indices in f32).
constexpr int64_t kMaxContext = int64_t(1) << 24;

struct HParams {
    std::string arch;               // "glm5next" or "glm5-next", as found in general.architecture
    uint32_t n_vocab = 0;
    uint32_t n_embd = 0;            // embedding_length (hidden)
    uint32_t n_ff = 0;              // feed_forward_length (dense layers)
    uint32_t n_ctx_train = 0;       // context_length (0 when absent)
    uint32_t n_layer_all = 0;       // block_count: trunk + nextn
    uint32_t n_nextn = 0;           // nextn_predict_layers
    uint32_t n_head = 0;            // attention.head_count (MLA heads = KDA heads)
    std::vector<int32_t> head_count_kv;  // [n_layer_all]: 0 = KDA layer, 1 = DSA layer
    float rms_eps = 1e-5f;          // attention.layer_norm_rms_epsilon
    float ln_eps = 1e-6f;           // attention.layer_norm_epsilon (indexer k_norm)
    uint32_t q_lora_rank = 0, kv_lora_rank = 0;
    uint32_t head_k_mla = 0, head_v_mla = 0;  // key_length_mla (nope), value_length_mla
    uint32_t idx_n_head = 0, idx_head_dim = 0, idx_top_k = 0, idx_kpool = 0;
    bool idx_select_tail = true;
    std::vector<bool> idx_full;     // [n_trunk]: indexer "full" (true) or "shared" (false)
    bool index_share_mtp = false;   // index_share_for_mtp_iteration
    uint32_t n_dense_lead = 0;      // leading_dense_block_count
    uint32_t n_expert = 0, n_expert_used = 0, n_expert_shared = 0;
    uint32_t n_expert_groups = 1, n_group_used = 1;
    uint32_t n_ff_exp = 0;          // expert_feed_forward_length
    float expert_weights_scale = 1.0f;
    bool expert_weights_norm = true;
    std::vector<float> swiglu_clamp_exp, swiglu_clamp_shexp;  // [n_layer_all], 0 = no clamp
    uint32_t ssm_conv_kernel = 4;
    uint32_t kda_head_dim = 0;
    bool has_kda_lower_bound = false;
    float kda_lower_bound = -5.0f;
    uint32_t hc_mult = 4, hc_sinkhorn_iters = 20;
    float hc_eps = 1e-6f;

    uint32_t n_trunk() const { return n_layer_all - n_nextn; }
    bool is_kda(uint32_t il) const { return head_count_kv[il] == 0; }
    bool is_dense_ffn(uint32_t il) const { return il < n_dense_lead; }
    // Whether layer il's indexer keeps its own keys (a full one; the NextN layer's always), not a shared one's.
    bool full_indexer(uint32_t il) const { return il >= n_trunk() || idx_full[il]; }
    uint32_t kda_inner() const { return kda_head_dim * n_head; }
    // Pooled keys a full indexer layer's cache of n_ctx rows holds: one per complete pool, at least one.
    uint32_t n_pooled(uint32_t n_ctx) const { return std::max<uint32_t>(1, n_ctx / idx_kpool); }
};

// Reads every hyper-parameter of a glm5next file from `ctx` (overrides already applied) and checks them.
// `arch` is the file's architecture spelling ("glm5next" or "glm5-next"), the prefix of every `{arch}.` key.
// Throws ModelError naming `path` and the key for a missing required key, a key of the wrong type or an
// inconsistent value (e.g. nextn_predict_layers >= block_count, kpool <= 1 or not dividing top_k). `asked`, when
// given, collects every key looked up (KeyReader).
HParams read_hparams(const gguf_context * ctx, const std::string & arch, const std::string & path,
                     std::set<std::string> * asked = nullptr);

}  // namespace glm5next
