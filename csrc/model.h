// A glm5next GGUF loaded for inference: hyper-parameters and weights (memory-mapped, never copied).
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "hparams.h"

namespace glm5next {

// Every error about a model file; bindings turn it into a Python exception (ValueError) naming the culprit.
struct ModelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// One override of a metadata key, llama.cpp's --override-kv KEY=TYPE:VALUE (TYPE: int, float, bool, str).
struct KvOverride {
    std::string key;   // either arch prefix is accepted ("glm5next." / "glm5-next.")
    std::string type;  // "int" | "float" | "bool" | "str"
    std::string value;
};
KvOverride parse_kv_override(const std::string & spec);  // throws ModelError on bad syntax

// The tokenizer stored in the file (tokenizer.ggml.*), checked at load. `tokens` is empty when the file has none.
struct Vocab {
    std::string model, pre;                  // tokenizer.ggml.model / .pre, e.g. "gpt2" / "glm4" ("" when absent)
    std::vector<std::string> tokens;         // [n_vocab] token strings (byte-level BPE alphabet for normal tokens)
    std::vector<int32_t> types;              // [n_vocab] llama.cpp token types: 1 normal, 3 control, 4 user-defined, 5 unused
    std::vector<std::string> merges;         // BPE merges "left right", highest priority first
    std::map<std::string, int32_t> special;  // "bos", "eos", "eot", "eom", "unk", "pad" -> id, those present
};

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

struct Model {
    HParams hp;
    ggml_tensor *tok_embd = nullptr, *output_norm = nullptr, *output = nullptr;
    std::vector<LayerWeights> layers;  // [n_layer_all]

    // Loads `path`, applies `overrides` before any hyper-parameter is read or checked. Throws ModelError
    // naming the file, key or tensor for every malformed input (never aborts).
    static std::unique_ptr<Model> load(const std::string & path, const std::vector<KvOverride> & overrides);
    ~Model();

    std::string path;
    std::map<std::string, ggml_tensor *> tensors;  // by GGUF name
    ggml_backend_t backend_cpu = nullptr;
    Vocab vocab;
    // A draft-only file (converter --mtp-only): the NextN layer, token_embd, output_norm and output, but no trunk
    // layer tensors; layers[0 .. n_trunk) are then all nullptr.
    bool draft_only = false;

    // The file's metadata after overrides (read it with the checks of gguf_keys.h, never gguf_get_val_* blindly).
    const gguf_context * gguf() const;

    struct Impl;
    std::unique_ptr<Impl> impl;  // gguf context, mmap, buffers
};

}  // namespace glm5next
