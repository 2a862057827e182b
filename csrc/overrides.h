// --override-kv: parsing (declared in model.h) and application to a gguf_context.
#pragma once

#include <string>
#include <vector>

#include "gguf.h"
#include "model.h"

namespace glm5next {

// Applies `overrides` in order to `ctx`, before anything reads it. A key written with either arch prefix
// is mapped to the file's own (the arch a general.architecture override sets, else the file's). An int
// override of an existing integer key keeps that key's type (range-checked), a float override of an f32/f64 key
// keeps its type; new keys become i64 / f32 / bool / str. Throws ModelError naming `path` and the override when
// the value does not parse, does not fit, or the stored key has another kind (str, bool, array, ...).
void apply_kv_overrides(gguf_context * ctx, const std::vector<KvOverride> & overrides, const std::string & path);

}  // namespace glm5next
