// The tensor table of docs/gguf.md (Tensors) as ggml shapes, checked against the file. Shapes follow llama.cpp's
// glm5-next loader (src/models/glm5-next.cpp, load_arch_tensors) so both runtimes accept the same files.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/tensors.h"

namespace glm5next {

namespace {

std::string shape_str(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

class Binder {
public:
    Binder(Model & m, const std::string & path) : m_(m), path_(path) {}

    // The tensor `name` with ggml shape `ne` (trailing 1s may be omitted in the file); `owner` says who
    // needs it ("DSA layer 3") for the message when it is missing.
    ggml_tensor * req(const std::string & name, std::initializer_list<int64_t> ne, const std::string & owner) const {
        ggml_tensor * t = find(name, ne, true);
        if (!t) throw ModelError(path_ + ": tensor " + name + " is missing (required by " + owner + ")");
        return t;
    }

    // Like req, but nullptr when absent. A present tensor must still have the expected shape.
    ggml_tensor * opt(const std::string & name, std::initializer_list<int64_t> ne) const {
        return find(name, ne, false);
    }

private:
    ggml_tensor * find(const std::string & name, std::initializer_list<int64_t> ne, bool required) const {
        std::vector<int64_t> dims(ne);
        while (dims.size() > 1 && dims.back() == 1) dims.pop_back();
        m_.tensor_table.push_back(TensorSpec{name, dims, required});
        const auto it = m_.tensors.find(name);
        if (it == m_.tensors.end()) return nullptr;
        ggml_tensor * t = it->second;
        int64_t want[GGML_MAX_DIMS] = {1, 1, 1, 1};
        int i = 0;
        for (int64_t d : ne) want[i++] = d;
        for (int d = 0; d < GGML_MAX_DIMS; ++d) {
            if (t->ne[d] != want[d]) {
                throw ModelError(path_ + ": tensor " + name + " has shape " + shape_str(t->ne, ggml_n_dims(t)) +
                                 ", expected " + shape_str(want, int(ne.size())) + " (ggml order)");
            }
        }
        return t;
    }

    Model & m_;
    const std::string & path_;
};

struct LayerBinder {
    const Binder & b;
    const HParams & hp;
    LayerWeights & L;
    std::string blk;    // "blk.N."
    std::string owner;  // "KDA layer N", ...

    ggml_tensor * req(const char * name, std::initializer_list<int64_t> ne) const { return b.req(blk + name, ne, owner); }

    void mhc() {
        const int64_t E = hp.n_embd, hc = hp.hc_mult, mix = (2 + hc) * hc;
        L.hc_attn_fn = req("hc_attn_fn.weight", {hc * E, mix});
        L.hc_attn_base = req("hc_attn_base.weight", {mix});
        L.hc_attn_scale = req("hc_attn_scale.weight", {3});
        L.hc_ffn_fn = req("hc_ffn_fn.weight", {hc * E, mix});
        L.hc_ffn_base = req("hc_ffn_base.weight", {mix});
        L.hc_ffn_scale = req("hc_ffn_scale.weight", {3});
    }

    void kda() {
        const int64_t E = hp.n_embd, d = hp.kda_head_dim, inner = hp.kda_inner(), K = hp.ssm_conv_kernel;
        // {K, 1, inner, 1} and llama.cpp's alternative {K, 1, inner} are the same ggml shape
        L.conv_q = req("ssm_conv1d_q.weight", {K, 1, inner, 1});
        L.conv_k = req("ssm_conv1d_k.weight", {K, 1, inner, 1});
        L.conv_v = req("ssm_conv1d_v.weight", {K, 1, inner, 1});
        L.wq = req("attn_q.weight", {E, inner});
        L.wk = req("attn_k.weight", {E, inner});
        L.wv = req("attn_v.weight", {E, inner});
        L.ssm_f_a = req("ssm_f_a.weight", {E, d});
        L.ssm_f_b = req("ssm_f_b.weight", {d, inner});
        L.ssm_beta = req("ssm_beta.weight", {E, hp.n_head});
        L.ssm_a = req("ssm_a", {hp.n_head});
        L.ssm_dt_b = req("ssm_dt.bias", {inner});
        L.ssm_g_a = req("ssm_g_a.weight", {E, d});
        L.ssm_g_b = req("ssm_g_b.weight", {d, inner});
        L.ssm_norm = req("ssm_norm.weight", {d});
        L.wo = req("attn_output.weight", {inner, E});
    }

    // NoPE MLA (rope.dimension_count is 0, checked in read_hparams), so the key is all "nope".
    void dsa(bool with_indexer) {
        const int64_t E = hp.n_embd, H = hp.n_head, qr = hp.q_lora_rank, kvr = hp.kv_lora_rank;
        const int64_t hk = hp.head_k_mla, hv = hp.head_v_mla;
        L.q_a_norm = req("attn_q_a_norm.weight", {qr});
        L.kv_a_norm = req("attn_kv_a_norm.weight", {kvr});
        L.wq_a = req("attn_q_a.weight", {E, qr});
        L.wq_b = req("attn_q_b.weight", {qr, H * hk});
        L.wkv_a = req("attn_kv_a_mqa.weight", {E, kvr});
        L.wk_b = req("attn_k_b.weight", {hk, kvr, H});
        L.wv_b = req("attn_v_b.weight", {kvr, hv, H});
        L.wo = req("attn_output.weight", {H * hv, E});
        if (!with_indexer) return;  // "shared" layers reuse the previous full layer's selection
        const int64_t ih = hp.idx_n_head, id = hp.idx_head_dim;
        L.idx_k_norm = req("indexer.k_norm.weight", {id});
        L.idx_k_norm_b = req("indexer.k_norm.bias", {id});
        L.idx_proj = req("indexer.proj.weight", {E, ih});
        L.idx_k = req("indexer.attn_k.weight", {E, id});
        L.idx_q_b = req("indexer.attn_q_b.weight", {qr, ih * id});
        L.idx_gate = req("indexer_compressor_gate.weight", {E, id});
        L.idx_ape = req("indexer_compressor_ape.weight", {id, hp.idx_kpool});
    }

    void dense_ffn() {
        const int64_t E = hp.n_embd, F = hp.n_ff;
        L.ffn_gate = req("ffn_gate.weight", {E, F});
        L.ffn_up = req("ffn_up.weight", {E, F});
        L.ffn_down = req("ffn_down.weight", {F, E});
    }

    void moe() {
        const int64_t E = hp.n_embd, F = hp.n_ff_exp, X = hp.n_expert, FS = int64_t(hp.n_ff_exp) * hp.n_expert_shared;
        L.gate_inp = req("ffn_gate_inp.weight", {E, X});
        L.exp_probs_b = req("exp_probs_b.bias", {X});
        L.gate_exps = req("ffn_gate_exps.weight", {E, F, X});
        L.up_exps = req("ffn_up_exps.weight", {E, F, X});
        L.down_exps = req("ffn_down_exps.weight", {F, E, X});
        if (FS == 0) return;  // no shared expert
        L.gate_shexp = req("ffn_gate_shexp.weight", {E, FS});
        L.up_shexp = req("ffn_up_shexp.weight", {E, FS});
        L.down_shexp = req("ffn_down_shexp.weight", {FS, E});
    }

    void nextn() {
        const int64_t E = hp.n_embd, V = hp.n_vocab;
        L.eh_proj = req("nextn.eh_proj.weight", {2 * E, E});
        L.enorm = req("nextn.enorm.weight", {E});
        L.hnorm = req("nextn.hnorm.weight", {E});
        L.shared_head_norm = req("nextn.shared_head_norm.weight", {E});
        // optional: the draft head falls back to token_embd / output
        L.nextn_embd = b.opt(blk + "nextn.embed_tokens.weight", {E, V});
        L.nextn_head = b.opt(blk + "nextn.shared_head_head.weight", {E, V});
    }
};

// True when no tensor belongs to a trunk layer (a draft-only file).
bool has_no_trunk_tensors(const Model & m) {
    const uint32_t n_trunk = m.hp.n_trunk();
    for (uint32_t il = 0; il < n_trunk; ++il) {
        const std::string prefix = "blk." + std::to_string(il) + ".";
        const auto it = m.tensors.lower_bound(prefix);
        if (it != m.tensors.end() && it->first.compare(0, prefix.size(), prefix) == 0) return false;
    }
    return true;
}

}  // namespace

void bind_tensors(Model & m, const std::string & path) {
    const HParams & hp = m.hp;
    const Binder b(m, path);
    const int64_t E = hp.n_embd, V = hp.n_vocab;
    m.tok_embd = b.req("token_embd.weight", {E, V}, "the model");
    m.output_norm = b.req("output_norm.weight", {E}, "the model");
    m.output = b.req("output.weight", {E, V}, "the model");

    m.draft_only = hp.n_nextn > 0 && has_no_trunk_tensors(m);
    m.layers.assign(hp.n_layer_all, LayerWeights{});
    for (uint32_t il = 0; il < hp.n_layer_all; ++il) {
        const bool is_nextn = il >= hp.n_trunk();
        if (!is_nextn && m.draft_only) continue;
        const std::string kind = is_nextn ? "NextN" : hp.is_kda(il) ? "KDA" : "DSA";
        LayerBinder lb{b, hp, m.layers[il], "blk." + std::to_string(il) + ".", kind + " layer " + std::to_string(il)};
        lb.L.attn_norm = lb.req("attn_norm.weight", {E});
        lb.L.ffn_norm = lb.req("ffn_norm.weight", {E});
        if (is_nextn) {
            lb.dsa(/*with_indexer=*/true);  // the draft layer's own indexer is always "full"
            lb.moe();
            lb.nextn();
            continue;
        }
        lb.mhc();
        if (hp.is_kda(il)) {
            lb.kda();
        } else {
            lb.dsa(hp.idx_full[il]);
        }
        if (hp.is_dense_ffn(il)) {
            lb.dense_ffn();
        } else {
            lb.moe();
        }
    }
}

}  // namespace glm5next
