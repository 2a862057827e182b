#include "model/gguf_keys.h"

#include "model/error.h"

namespace glm5next {

namespace {

const char * const ARCHES[] = {"glm5next", "glm5-next"};

const char * scalar_type_name(gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8: return "u8";
        case GGUF_TYPE_INT8: return "i8";
        case GGUF_TYPE_UINT16: return "u16";
        case GGUF_TYPE_INT16: return "i16";
        case GGUF_TYPE_UINT32: return "u32";
        case GGUF_TYPE_INT32: return "i32";
        case GGUF_TYPE_FLOAT32: return "f32";
        case GGUF_TYPE_BOOL: return "bool";
        case GGUF_TYPE_STRING: return "str";
        case GGUF_TYPE_ARRAY: return "array";
        case GGUF_TYPE_UINT64: return "u64";
        case GGUF_TYPE_INT64: return "i64";
        case GGUF_TYPE_FLOAT64: return "f64";
        default: return "unknown";
    }
}

// Element i of integer data stored as `t`. Unsigned 64-bit values above INT64_MAX saturate, which every
// caller's range check then rejects.
int64_t int_at(const void * data, gguf_type t, size_t i) {
    switch (t) {
        case GGUF_TYPE_UINT8: return static_cast<const uint8_t *>(data)[i];
        case GGUF_TYPE_INT8: return static_cast<const int8_t *>(data)[i];
        case GGUF_TYPE_UINT16: return static_cast<const uint16_t *>(data)[i];
        case GGUF_TYPE_INT16: return static_cast<const int16_t *>(data)[i];
        case GGUF_TYPE_UINT32: return static_cast<const uint32_t *>(data)[i];
        case GGUF_TYPE_INT32: return static_cast<const int32_t *>(data)[i];
        case GGUF_TYPE_INT64: return static_cast<const int64_t *>(data)[i];
        case GGUF_TYPE_UINT64: {
            const uint64_t v = static_cast<const uint64_t *>(data)[i];
            return v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v);
        }
        default: return 0;  // unreachable: callers check is_int_type
    }
}

double float_at(const void * data, gguf_type t, size_t i) {
    return t == GGUF_TYPE_FLOAT32 ? static_cast<const float *>(data)[i] : static_cast<const double *>(data)[i];
}

}  // namespace

bool is_known_arch(const std::string & arch) {
    for (const char * a : ARCHES) {
        if (arch == a) return true;
    }
    return false;
}

std::string map_arch_prefix(const std::string & key, const std::string & arch) {
    if (!is_known_arch(arch)) return key;
    for (const char * a : ARCHES) {
        const std::string p = std::string(a) + ".";
        if (key.compare(0, p.size(), p) == 0) return arch + "." + key.substr(p.size());
    }
    return key;
}

std::string kv_type_name(const gguf_context * ctx, int64_t key_id) {
    const gguf_type t = gguf_get_kv_type(ctx, key_id);
    if (t != GGUF_TYPE_ARRAY) return scalar_type_name(t);
    return std::string("array of ") + scalar_type_name(gguf_get_arr_type(ctx, key_id));
}

bool is_int_type(gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
            return true;
        default:
            return false;
    }
}

bool is_float_type(gguf_type t) { return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64; }

KeyReader::KeyReader(const gguf_context * ctx, std::string path, std::string prefix, std::set<std::string> * asked)
    : ctx_(ctx), path_(std::move(path)), prefix_(std::move(prefix)), asked_(asked) {}

bool KeyReader::has(const std::string & key) const { return find(key) >= 0; }

std::optional<size_t> KeyReader::array_len(const std::string & key) const {
    const int64_t id = find(key);
    if (id < 0 || gguf_get_kv_type(ctx_, id) != GGUF_TYPE_ARRAY) return std::nullopt;
    return gguf_get_arr_n(ctx_, id);
}

void KeyReader::missing(const std::string & key) const {
    throw ModelError(path_ + ": required key " + key + " is missing");
}

void KeyReader::fail(const std::string & key, const std::string & what) const {
    throw ModelError(path_ + ": key " + key + ": " + what);
}

int64_t KeyReader::find(const std::string & key) const {
    if (asked_ != nullptr) asked_->insert(key);
    return gguf_find_key(ctx_, key.c_str());
}

int64_t KeyReader::find_array(const std::string & key, const char * want) const {
    const int64_t id = find(key);
    if (id >= 0 && gguf_get_kv_type(ctx_, id) != GGUF_TYPE_ARRAY) {
        fail(key, std::string("stored as ") + kv_type_name(ctx_, id) + ", expected an array of " + want);
    }
    return id;
}

std::optional<int64_t> KeyReader::get_int(const std::string & key, int64_t min, int64_t max) const {
    const int64_t id = find(key);
    if (id < 0) return std::nullopt;
    const gguf_type t = gguf_get_kv_type(ctx_, id);
    if (!is_int_type(t)) fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected an integer");
    const int64_t v = int_at(gguf_get_val_data(ctx_, id), t, 0);
    if (v < min || v > max) {
        fail(key, "value " + std::to_string(v) + " is out of range [" + std::to_string(min) + ", " +
                      std::to_string(max) + "]");
    }
    return v;
}

std::optional<double> KeyReader::get_float(const std::string & key) const {
    const int64_t id = find(key);
    if (id < 0) return std::nullopt;
    const gguf_type t = gguf_get_kv_type(ctx_, id);
    if (!is_float_type(t)) fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected f32");
    return float_at(gguf_get_val_data(ctx_, id), t, 0);
}

std::optional<bool> KeyReader::get_bool(const std::string & key) const {
    const int64_t id = find(key);
    if (id < 0) return std::nullopt;
    if (gguf_get_kv_type(ctx_, id) != GGUF_TYPE_BOOL) {
        fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected bool");
    }
    return gguf_get_val_bool(ctx_, id);
}

std::optional<std::string> KeyReader::get_str(const std::string & key) const {
    const int64_t id = find(key);
    if (id < 0) return std::nullopt;
    if (gguf_get_kv_type(ctx_, id) != GGUF_TYPE_STRING) {
        fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected str");
    }
    return std::string(gguf_get_val_str(ctx_, id));
}

std::optional<std::vector<int64_t>> KeyReader::get_int_array(const std::string & key, int64_t min,
                                                             int64_t max) const {
    const int64_t id = find_array(key, "integers");
    if (id < 0) return std::nullopt;
    const gguf_type t = gguf_get_arr_type(ctx_, id);
    if (!is_int_type(t)) fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected an array of integers");
    const size_t n = gguf_get_arr_n(ctx_, id);
    const void * data = gguf_get_arr_data(ctx_, id);
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i) {
        out[i] = int_at(data, t, i);
        if (out[i] < min || out[i] > max) {
            fail(key, "element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", out of range [" +
                          std::to_string(min) + ", " + std::to_string(max) + "]");
        }
    }
    return out;
}

std::optional<std::vector<double>> KeyReader::get_float_array(const std::string & key) const {
    const int64_t id = find_array(key, "f32");
    if (id < 0) return std::nullopt;
    const gguf_type t = gguf_get_arr_type(ctx_, id);
    if (!is_float_type(t)) fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected an array of f32");
    const size_t n = gguf_get_arr_n(ctx_, id);
    const void * data = gguf_get_arr_data(ctx_, id);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = float_at(data, t, i);
    return out;
}

std::optional<std::vector<bool>> KeyReader::get_bool_array(const std::string & key) const {
    const int64_t id = find_array(key, "bool");
    if (id < 0) return std::nullopt;
    if (gguf_get_arr_type(ctx_, id) != GGUF_TYPE_BOOL) {
        fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected an array of bool");
    }
    const size_t n = gguf_get_arr_n(ctx_, id);
    const auto * data = static_cast<const uint8_t *>(gguf_get_arr_data(ctx_, id));  // GGUF bools are 1 byte
    std::vector<bool> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = data[i] != 0;
    return out;
}

std::optional<std::vector<std::string>> KeyReader::get_str_array(const std::string & key) const {
    const int64_t id = find_array(key, "str");
    if (id < 0) return std::nullopt;
    if (gguf_get_arr_type(ctx_, id) != GGUF_TYPE_STRING) {
        fail(key, "stored as " + kv_type_name(ctx_, id) + ", expected an array of str");
    }
    const size_t n = gguf_get_arr_n(ctx_, id);
    std::vector<std::string> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = gguf_get_arr_str(ctx_, id, i);
    return out;
}

}  // namespace glm5next
