// --override-kv (llama.cpp's KEY=TYPE:VALUE): parsing and application to a gguf_context.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "gguf.h"
#include "model/error.h"

namespace glm5next {

// One override of a metadata key, llama.cpp's --override-kv KEY=TYPE:VALUE (TYPE: int, float, bool, str).
struct KvOverride {
    std::string key;   // either arch prefix is accepted ("glm5next." / "glm5-next.")
    std::string type;  // "int" | "float" | "bool" | "str"
    std::string value;
};

// Parses one "KEY=TYPE:VALUE" string. Throws ModelError on bad syntax.
KvOverride parse_kv_override(const std::string & spec);

// Parses one --override-kv value, which may hold several overrides separated by commas as llama.cpp allows
// ("general.name=str:x,glm5next.expert_used_count=int:1"). A comma separates only where the next override begins
// (a KEY of letters, digits, '.', '_' or '-', then '=int:', '=float:', '=bool:' or '=str:'), so a str VALUE may
// hold commas (llama.cpp splits at every comma); a str VALUE cannot hold ",KEY=TYPE:" itself. Throws ModelError
// on bad syntax, naming the override.
std::vector<KvOverride> parse_kv_overrides(const std::string & value);

// An override as applied to a file: its key spelled as the file's, and whether the file lacked that key.
struct AppliedOverride {
    KvOverride kv;
    bool new_key = false;
};

// Applies `overrides` in order to `ctx`, before anything reads it. A key written with either arch prefix
// is mapped to the file's own (the arch a general.architecture override sets, else the file's). An int
// override of an existing integer key keeps that key's type (range-checked), a float override of an f32/f64 key
// keeps its type; new keys become i64 / f32 / bool / str. Throws ModelError naming `path` and the override when
// the value does not parse, does not fit, or the stored key has another kind (str, bool, array, ...). Returns the
// overrides as applied, in order.
std::vector<AppliedOverride> apply_kv_overrides(gguf_context * ctx, const std::vector<KvOverride> & overrides,
                                                const std::string & path);

// Refuses an override that changes nothing: a key of the architecture's namespace (`arch` + ".") that the file
// lacked and the loader never looked up (`asked`, KeyReader's), a misspelling such as
// glm5next.attention.indexer.topk, which llama.cpp would ignore silently. Keys outside it (general.*, a custom
// namespace) are stored as llama.cpp stores them. Throws ModelError naming `path`, the override and the nearest
// key the loader or the file knows.
void check_override_keys(const gguf_context * ctx, const std::vector<AppliedOverride> & applied,
                         const std::string & arch, const std::set<std::string> & asked, const std::string & path);

}  // namespace glm5next
