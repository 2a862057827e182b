// The NextN (draft) layer's weights as the draft head uses them: as stored, or requantized at load to q8_0 / q4_0
// (--spec-draft-type; docs/gguf.md, Types), so a user can try smaller draft layers without reconverting. The rules
// follow the converter's (docs/gguf.md, Types): norms, router, indexer and latent projections keep their stored type;
// attn_q_a, attn_q_b and nextn.eh_proj never go below q8_0.
#pragma once

#include <map>
#include <string>

#include "ggml-backend.h"
#include "model/model.h"

namespace glm5next {

class DraftWeights {
public:
    // type: GGML_TYPE_COUNT keeps every tensor as stored; GGML_TYPE_Q8_0 / GGML_TYPE_Q4_0 requantize. Throws
    // std::invalid_argument for another type or a file without a NextN layer.
    DraftWeights(const Model & model, ggml_type type);
    ~DraftWeights();
    DraftWeights(const DraftWeights &) = delete;
    DraftWeights & operator=(const DraftWeights &) = delete;

    const LayerWeights & layer() const { return w_; }
    // The tensors requantized at load: GGUF name -> the type they now have (the others are as stored).
    const std::map<std::string, ggml_type> & requantized() const { return requantized_; }

private:
    LayerWeights w_;
    std::map<std::string, ggml_type> requantized_;
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
};

// "f16"/"q8_0"/"q4_0"/"auto" -> ggml type (auto and "" -> GGML_TYPE_COUNT = as stored). Throws std::invalid_argument.
ggml_type draft_type_from_name(const std::string & name);

}  // namespace glm5next
