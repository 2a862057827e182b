// Typed, checked access to GGUF metadata keys. ggml's gguf_get_val_* abort on a type mismatch, so every read
// here checks the stored type first and throws ModelError naming the file and the key instead.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gguf.h"

namespace glm5next {

// The two spellings of the architecture (docs/gguf.md, Architecture): the runtime loads both.
bool is_known_arch(const std::string & arch);

// `key` with a leading "glm5next." or "glm5-next." rewritten to `arch` + "." (when `arch` is a known spelling),
// so that callers may name a key with either prefix. Any other key is returned unchanged.
std::string map_arch_prefix(const std::string & key, const std::string & arch);

// Human-readable type of a stored key, e.g. "u32", "str", "array of f32".
std::string kv_type_name(const gguf_context * ctx, int64_t key_id);

bool is_int_type(gguf_type t);
bool is_float_type(gguf_type t);

// Reads keys of one file. `prefix` ("glm5next." / "glm5-next.") is prepended by the arch_* helpers; the
// plain helpers take full key names. Missing optional keys give std::nullopt; a present key of the wrong
// type, or an integer out of range for the field, throws ModelError("<path>: key <key>: ...").
class KeyReader {
public:
    // `asked`, when given, collects every key this reader looks up, present or not (which keys a loader knows:
    // check_override_keys).
    KeyReader(const gguf_context * ctx, std::string path, std::string prefix, std::set<std::string> * asked = nullptr);

    const std::string & prefix() const { return prefix_; }
    std::string arch_key(const std::string & suffix) const { return prefix_ + suffix; }
    bool has(const std::string & key) const;
    // Element count when `key` is an array, nullopt when it is absent or a scalar.
    std::optional<size_t> array_len(const std::string & key) const;

    std::optional<int64_t> get_int(const std::string & key, int64_t min, int64_t max) const;
    std::optional<double> get_float(const std::string & key) const;
    std::optional<bool> get_bool(const std::string & key) const;
    std::optional<std::string> get_str(const std::string & key) const;
    // Arrays. An integer array accepts any integer element type; a float array f32 or f64.
    std::optional<std::vector<int64_t>> get_int_array(const std::string & key, int64_t min, int64_t max) const;
    std::optional<std::vector<double>> get_float_array(const std::string & key) const;
    std::optional<std::vector<bool>> get_bool_array(const std::string & key) const;
    std::optional<std::vector<std::string>> get_str_array(const std::string & key) const;

    // Throws ModelError("<path>: required key <key> is missing") for an absent key.
    [[noreturn]] void missing(const std::string & key) const;
    // Throws ModelError("<path>: key <key>: <what>").
    [[noreturn]] void fail(const std::string & key, const std::string & what) const;

private:
    int64_t find(const std::string & key) const;
    int64_t find_array(const std::string & key, const char * want) const;

    const gguf_context * ctx_;
    std::string path_, prefix_;
    std::set<std::string> * asked_;
};

}  // namespace glm5next
