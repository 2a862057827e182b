// Steps of Model::load that live in their own files (model_tensors.cpp, vocab.cpp).
#pragma once

#include <string>

#include "gguf.h"
#include "model.h"

namespace glm5next {

// Checks every tensor that m.hp implies (gguf.md, Tensors; shapes in ggml order) against m.tensors and
// fills m.tok_embd, m.output_norm, m.output, m.layers and m.draft_only. Throws ModelError naming `path`
// and the tensor when one is missing or has another shape.
void bind_tensors(Model & m, const std::string & path);

// The tokenizer keys of `ctx` (all optional), checked against `hp`: token_type and the token list have
// n_vocab entries, special ids are within the vocab. Throws ModelError naming `path` and the key.
Vocab read_vocab(const gguf_context * ctx, const HParams & hp, const std::string & path);

}  // namespace glm5next
