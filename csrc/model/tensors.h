// The tensor table of docs/gguf.md (Tensors), a step of Model::load.
#pragma once

#include <string>

#include "model/model.h"

namespace glm5next {

// Checks every tensor that m.hp implies (names: docs/gguf.md, Tensors; shapes in ggml order: the table in
// tensors.cpp) against m.tensors and fills m.tok_embd, m.output_norm, m.output, m.layers and m.draft_only. Throws
// ModelError naming `path` and the tensor when one is missing or has another shape.
void bind_tensors(Model & m, const std::string & path);

}  // namespace glm5next
