// HParams from GGUF metadata (docs/gguf.md, Metadata). Key names, aliases and defaults follow that page and
// llama.cpp's glm5-next loader, so files written by either converter load.
#include "model/hparams.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf_keys.h"
#include "model/error.h"

namespace glm5next {

namespace {

constexpr int64_t U32_MAX = UINT32_MAX;
// Limits a value no real file comes near, so that a corrupt or hostile file fails here naming the key instead
// of aborting in ggml on the first token (int32 op parameters, tensor sizes that overflow, endless loops).
constexpr int64_t MAX_SINKHORN_ITERS = 1000;       // GLM-5.3-Flash: 20
constexpr int64_t MAX_CONV_KERNEL = 1024;          // GLM-5.3-Flash: 4

// A float range, shown as "(0, 1]" in errors.
struct Range {
    double lo, hi;
    bool lo_open = false;
    bool contains(double v) const { return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi; }
    std::string str() const { return (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]"; }
    static std::string num(double v) {
        std::ostringstream o;
        o << v;
        return o.str();
    }
};
constexpr double F32_MAX = 3.4028234663852886e38;
const Range EPSILON{0.0, 1.0, true}, EPSILON_OR_ZERO{0.0, 1.0}, POSITIVE{0.0, 1e4, true}, CLAMP{0.0, F32_MAX},
    BOUND{-1e4, 1e4};
constexpr uint32_t EXPERT_GATING_NONE = 0, EXPERT_GATING_SIGMOID = 2;  // llama.cpp's enum values

struct Reader {
    KeyReader kv;

    std::string key(const std::string & suffix) const { return kv.arch_key(suffix); }

    // Required `{arch}.suffix`, an integer in [min, max].
    uint32_t u32(const std::string & suffix, int64_t min = 0, int64_t max = U32_MAX) const {
        const auto v = kv.get_int(key(suffix), min, max);
        if (!v) kv.missing(key(suffix));
        return uint32_t(*v);
    }
    uint32_t u32_or(const std::string & suffix, uint32_t dflt, int64_t min = 0) const {
        return uint32_t(kv.get_int(key(suffix), min, U32_MAX).value_or(dflt));
    }
    // Required `{arch}.suffix`, a float in `range`.
    float f32(const std::string & suffix, const Range & range) const {
        const auto v = kv.get_float(key(suffix));
        if (!v) kv.missing(key(suffix));
        return in_range(key(suffix), *v, range);
    }
    float f32_or(const std::string & suffix, float dflt, const Range & range) const {
        const auto v = kv.get_float(key(suffix));
        return v ? in_range(key(suffix), *v, range) : dflt;
    }
    float in_range(const std::string & k, double v, const Range & range) const {
        if (!range.contains(v)) kv.fail(k, "is " + Range::num(v) + "; it must be a finite number in " + range.str());
        return float(v);
    }
    // The first of `suffixes` present (an alias list), or nullopt.
    std::optional<std::string> first_present(std::initializer_list<const char *> suffixes) const {
        for (const char * s : suffixes) {
            if (kv.has(key(s))) return key(s);
        }
        return std::nullopt;
    }
    // A per-layer f32 key stored as an array [n] or as one scalar for every layer (llama.cpp's get_key_or_arr),
    // each value in `range`.
    std::optional<std::vector<float>> f32_per_layer(const std::string & suffix, uint32_t n, const Range & range) const {
        const std::string k = key(suffix);
        if (!kv.has(k)) return std::nullopt;
        if (!kv.array_len(k)) return std::vector<float>(n, in_range(k, *kv.get_float(k), range));
        const auto arr = *kv.get_float_array(k);
        if (arr.size() != n) {
            kv.fail(k, "has " + std::to_string(arr.size()) + " entries, expected block_count = " + std::to_string(n));
        }
        std::vector<float> out;
        for (double v : arr) out.push_back(in_range(k, v, range));
        return out;
    }
};

void read_attention(const Reader & r, HParams & hp) {
    hp.n_head = r.u32("attention.head_count", 1);
    hp.rms_eps = r.f32("attention.layer_norm_rms_epsilon", EPSILON);
    hp.ln_eps = r.f32_or("attention.layer_norm_epsilon", hp.ln_eps, EPSILON);
    hp.q_lora_rank = r.u32("attention.q_lora_rank", 1);
    hp.kv_lora_rank = r.u32("attention.kv_lora_rank", 1);
    hp.head_k_mla = r.u32("attention.key_length_mla", 1);
    hp.head_v_mla = r.u32("attention.value_length_mla", 1);
    // GLM-5.3-Flash is NoPE; the engine has no RoPE path, so a file asking for one cannot run correctly.
    const uint32_t n_rot = r.u32_or("rope.dimension_count", 0);
    if (n_rot != 0) {
        r.kv.fail(r.key("rope.dimension_count"), "is " + std::to_string(n_rot) + "; glm5next is NoPE (0)");
    }
}

void read_layer_kinds(const Reader & r, HParams & hp) {
    const std::string k = r.key("attention.head_count_kv");
    const auto kv = r.kv.get_int_array(k, 0, INT32_MAX);
    if (!kv) r.kv.missing(k);
    if (kv->size() != hp.n_layer_all) {
        r.kv.fail(k, "has " + std::to_string(kv->size()) + " entries, expected block_count = " +
                         std::to_string(hp.n_layer_all));
    }
    hp.head_count_kv.assign(kv->begin(), kv->end());
    for (uint32_t il = hp.n_trunk(); il < hp.n_layer_all; ++il) {
        if (hp.head_count_kv[il] == 0) {
            r.kv.fail(k, "NextN layer " + std::to_string(il) + " is 0 (KDA); the NextN layer is a DSA layer");
        }
    }
}

void read_indexer(const Reader & r, HParams & hp) {
    hp.idx_n_head = r.u32("attention.indexer.head_count", 1);
    hp.idx_head_dim = r.u32("attention.indexer.key_length", 1);
    hp.idx_top_k = r.u32("attention.indexer.top_k", 1, kMaxContext);

    const auto kpool_key = r.first_present({"attention.indexer.kpool", "attention.indexer.block_size"});
    if (!kpool_key) {
        r.kv.fail(r.key("attention.indexer.kpool"),
                  "required key is missing (its alias " + r.key("attention.indexer.block_size") + " too)");
    }
    hp.idx_kpool = uint32_t(*r.kv.get_int(*kpool_key, 0, U32_MAX));
    if (hp.idx_kpool <= 1 || hp.idx_top_k % hp.idx_kpool != 0) {
        r.kv.fail(*kpool_key, "is " + std::to_string(hp.idx_kpool) + "; it must be > 1 and divide " +
                                  r.key("attention.indexer.top_k") + " = " + std::to_string(hp.idx_top_k));
    }
    hp.idx_select_tail = r.kv.get_bool(r.key("attention.indexer.kpool_select_tail")).value_or(true);

    const std::string types_key = r.key("attention.indexer.types");
    hp.idx_full = r.kv.get_bool_array(types_key).value_or(std::vector<bool>(hp.n_trunk(), true));
    if (hp.idx_full.size() != hp.n_trunk()) {
        r.kv.fail(types_key, "has " + std::to_string(hp.idx_full.size()) + " entries, expected one per trunk layer (" +
                                 std::to_string(hp.n_trunk()) + ")");
    }
    // A "shared" layer reuses the selection of the previous full DSA layer, so one must exist.
    bool seen_full = false;
    for (uint32_t il = 0; il < hp.n_trunk(); ++il) {
        if (hp.is_kda(il)) continue;
        if (!hp.idx_full[il] && !seen_full) {
            r.kv.fail(types_key, "DSA layer " + std::to_string(il) +
                                     " is 'shared' but no earlier DSA layer has a full indexer to share");
        }
        seen_full = seen_full || hp.idx_full[il];
    }

    const auto share_key = r.first_present({"index_share_for_mtp_iteration", "attention.indexer.index_share_mtp",
                                            "attention.indexer.share_for_mtp_iteration"});
    hp.index_share_mtp = share_key ? *r.kv.get_bool(*share_key) : false;
}

void read_moe(const Reader & r, HParams & hp) {
    hp.n_dense_lead = r.u32_or("leading_dense_block_count", 0);
    if (hp.n_dense_lead > hp.n_trunk()) {
        r.kv.fail(r.key("leading_dense_block_count"), "is " + std::to_string(hp.n_dense_lead) +
                                                          ", more than the " + std::to_string(hp.n_trunk()) +
                                                          " trunk layers (the NextN layer is always MoE)");
    }
    hp.n_expert = r.u32("expert_count", 1);
    hp.n_expert_used = r.u32("expert_used_count", 1);
    if (hp.n_expert_used > hp.n_expert) {
        r.kv.fail(r.key("expert_used_count"), "is " + std::to_string(hp.n_expert_used) + ", more than " +
                                                  r.key("expert_count") + " = " + std::to_string(hp.n_expert));
    }
    hp.n_expert_shared = r.u32("expert_shared_count");
    hp.n_expert_groups = r.u32_or("expert_group_count", 1, 1);
    hp.n_group_used = r.u32_or("expert_group_used_count", 1, 1);
    if (hp.n_expert % hp.n_expert_groups != 0 || hp.n_group_used > hp.n_expert_groups) {
        r.kv.fail(r.key("expert_group_count"),
                  "is " + std::to_string(hp.n_expert_groups) + " with expert_group_used_count " +
                      std::to_string(hp.n_group_used) + "; it must divide expert_count = " +
                      std::to_string(hp.n_expert) + " and be >= the groups used");
    }
    hp.n_ff_exp = r.u32("expert_feed_forward_length", 1);
    hp.expert_weights_scale = r.f32_or("expert_weights_scale", hp.expert_weights_scale, POSITIVE);
    hp.expert_weights_norm = r.kv.get_bool(r.key("expert_weights_norm")).value_or(hp.expert_weights_norm);
    // The router is sigmoid-scored (docs/model.md, MoE); llama.cpp also reads "none" (0) as sigmoid.
    const uint32_t gating = r.u32_or("expert_gating_func", EXPERT_GATING_SIGMOID);
    if (gating != EXPERT_GATING_NONE && gating != EXPERT_GATING_SIGMOID) {
        r.kv.fail(r.key("expert_gating_func"), "is " + std::to_string(gating) + "; only 2 (sigmoid) is supported");
    }
    hp.swiglu_clamp_exp = r.f32_per_layer("swiglu_clamp_exp", hp.n_layer_all, CLAMP)
                              .value_or(std::vector<float>(hp.n_layer_all, 0.0f));
    hp.swiglu_clamp_shexp = r.f32_per_layer("swiglu_clamp_shexp", hp.n_layer_all, CLAMP).value_or(hp.swiglu_clamp_exp);
}

void read_kda_and_mhc(const Reader & r, HParams & hp) {
    hp.ssm_conv_kernel = r.u32("ssm.conv_kernel", 2, MAX_CONV_KERNEL);
    hp.kda_head_dim = r.u32("kda.head_dim", 1);
    if (const auto lb = r.kv.get_float(r.key("kda.gate_lower_bound"))) {
        hp.has_kda_lower_bound = true;
        hp.kda_lower_bound = r.in_range(r.key("kda.gate_lower_bound"), *lb, BOUND);
    }
    hp.hc_mult = r.u32("hyper_connection.count");
    if (hp.hc_mult != 4) {
        r.kv.fail(r.key("hyper_connection.count"), "is " + std::to_string(hp.hc_mult) + "; only 4 is supported");
    }
    hp.hc_sinkhorn_iters = r.u32("hyper_connection.sinkhorn_iterations", 1, MAX_SINKHORN_ITERS);
    hp.hc_eps = r.f32("hyper_connection.epsilon", EPSILON_OR_ZERO);
}

// vocab_size, or the length of the token list when the key is absent (llama.cpp does the same).
uint32_t read_n_vocab(const Reader & r) {
    if (const auto v = r.kv.get_int(r.key("vocab_size"), 1, U32_MAX)) return uint32_t(*v);
    if (const auto n = r.kv.array_len("tokenizer.ggml.tokens"); n && *n > 0) {
        return uint32_t(std::min<size_t>(*n, U32_MAX));
    }
    r.kv.missing(r.key("vocab_size"));
}

}  // namespace

HParams read_hparams(const gguf_context * ctx, const std::string & arch, const std::string & path,
                     std::set<std::string> * asked) {
    const Reader r{KeyReader(ctx, path, arch + ".", asked)};
    HParams hp;
    hp.arch = arch;
    hp.n_layer_all = r.u32("block_count", 1);
    hp.n_nextn = r.u32_or("nextn_predict_layers", 0);
    if (hp.n_nextn >= hp.n_layer_all) {
        r.kv.fail(r.key("nextn_predict_layers"), "is " + std::to_string(hp.n_nextn) + ", must be < " +
                                                     r.key("block_count") + " = " + std::to_string(hp.n_layer_all));
    }
    hp.n_vocab = read_n_vocab(r);
    hp.n_embd = r.u32("embedding_length", 1);
    hp.n_ff = r.u32("feed_forward_length");
    hp.n_ctx_train = r.u32_or("context_length", 0);
    read_layer_kinds(r, hp);
    read_attention(r, hp);
    read_indexer(r, hp);
    read_moe(r, hp);
    read_kda_and_mhc(r, hp);
    return hp;
}

}  // namespace glm5next
