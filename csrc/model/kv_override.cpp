// llama.cpp's --override-kv KEY=TYPE:VALUE, applied to the gguf_context so that every later read (and check)
// sees the overridden value.
#include "model/kv_override.h"

#include <cctype>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <cstdint>

#include "model/gguf_keys.h"

namespace glm5next {

namespace {

std::string describe(const KvOverride & o) { return o.key + "=" + o.type + ":" + o.value; }

[[noreturn]] void bad(const std::string & context, const KvOverride & o, const std::string & what) {
    throw ModelError(context + "--override-kv " + describe(o) + ": " + what);
}

int64_t parse_int(const KvOverride & o, const std::string & context) {
    const std::string & s = o.value;
    const size_t skip = !s.empty() && s[0] == '+' ? 1 : 0;  // from_chars rejects a leading '+'
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data() + skip, s.data() + s.size(), v);
    if (s.size() == skip || ec != std::errc() || end != s.data() + s.size()) {
        bad(context, o, "'" + s + "' is not a 64-bit integer");
    }
    return v;
}

double parse_float(const KvOverride & o, const std::string & context) {
    const std::string & s = o.value;
    char * end = nullptr;
    const double v = s.empty() || std::isspace(static_cast<unsigned char>(s[0])) ? 0.0 : std::strtod(s.c_str(), &end);
    if (end == nullptr || end != s.c_str() + s.size()) bad(context, o, "'" + s + "' is not a number");
    return v;
}

bool parse_bool(const KvOverride & o, const std::string & context) {
    if (o.value == "true") return true;
    if (o.value == "false") return false;
    bad(context, o, "'" + o.value + "' is not a bool (true or false)");
}

// Checks TYPE and VALUE syntax; `context` prefixes messages (the file path once one is known).
void check_syntax(const KvOverride & o, const std::string & context) {
    if (o.key.empty()) bad(context, o, "empty KEY (expected KEY=TYPE:VALUE)");
    if (o.type == "int") {
        parse_int(o, context);
    } else if (o.type == "float") {
        parse_float(o, context);
    } else if (o.type == "bool") {
        parse_bool(o, context);
    } else if (o.type != "str") {
        bad(context, o, "unknown TYPE '" + o.type + "' (expected int, float, bool or str)");
    }
}

// Stores `v` in `key` with the existing integer type `t`, if it fits.
void set_int_as(gguf_context * ctx, const std::string & key, gguf_type t, int64_t v, const KvOverride & o,
                const std::string & context) {
    auto fits = [&](int64_t lo, int64_t hi) {
        if (v < lo || v > hi) {
            bad(context, o, std::to_string(v) + " does not fit the key's stored type (range [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + "])");
        }
    };
    const char * k = key.c_str();
    switch (t) {
        case GGUF_TYPE_UINT8: fits(0, UINT8_MAX); gguf_set_val_u8(ctx, k, uint8_t(v)); break;
        case GGUF_TYPE_INT8: fits(INT8_MIN, INT8_MAX); gguf_set_val_i8(ctx, k, int8_t(v)); break;
        case GGUF_TYPE_UINT16: fits(0, UINT16_MAX); gguf_set_val_u16(ctx, k, uint16_t(v)); break;
        case GGUF_TYPE_INT16: fits(INT16_MIN, INT16_MAX); gguf_set_val_i16(ctx, k, int16_t(v)); break;
        case GGUF_TYPE_UINT32: fits(0, UINT32_MAX); gguf_set_val_u32(ctx, k, uint32_t(v)); break;
        case GGUF_TYPE_INT32: fits(INT32_MIN, INT32_MAX); gguf_set_val_i32(ctx, k, int32_t(v)); break;
        case GGUF_TYPE_UINT64: fits(0, INT64_MAX); gguf_set_val_u64(ctx, k, uint64_t(v)); break;
        default: gguf_set_val_i64(ctx, k, v); break;
    }
}

void apply_one(gguf_context * ctx, const KvOverride & o, const std::string & key, const std::string & context) {
    check_syntax(o, context);
    // ggml aborts on a general.alignment it dislikes, and the tensor offsets were computed with the old one.
    if (key == GGUF_KEY_GENERAL_ALIGNMENT) bad(context, o, "general.alignment cannot be overridden");

    const int64_t id = gguf_find_key(ctx, key.c_str());
    const gguf_type stored = id >= 0 ? gguf_get_kv_type(ctx, id) : GGUF_TYPE_COUNT;
    auto mismatch = [&]() {
        bad(context, o, "key " + key + " is stored as " + kv_type_name(ctx, id) + ", not as " + o.type +
                            (stored == GGUF_TYPE_ARRAY ? " (arrays cannot be overridden)" : ""));
    };
    const char * k = key.c_str();
    if (o.type == "int") {
        const int64_t v = parse_int(o, context);
        if (id < 0) {
            gguf_set_val_i64(ctx, k, v);
        } else if (is_int_type(stored)) {
            set_int_as(ctx, key, stored, v, o, context);
        } else {
            mismatch();
        }
    } else if (o.type == "float") {
        const double v = parse_float(o, context);
        if (stored == GGUF_TYPE_FLOAT64) {
            gguf_set_val_f64(ctx, k, v);
        } else if (id < 0 || stored == GGUF_TYPE_FLOAT32) {
            if (std::isfinite(v) && std::fabs(v) > FLT_MAX) bad(context, o, "does not fit f32");
            gguf_set_val_f32(ctx, k, float(v));
        } else {
            mismatch();
        }
    } else if (o.type == "bool") {
        if (id >= 0 && stored != GGUF_TYPE_BOOL) mismatch();
        gguf_set_val_bool(ctx, k, parse_bool(o, context));
    } else {
        if (id >= 0 && stored != GGUF_TYPE_STRING) mismatch();
        gguf_set_val_str(ctx, k, o.value.c_str());
    }
}

}  // namespace

namespace {

// Whether an override ("KEY=TYPE:") starts at s[i].
bool override_starts_at(const std::string & s, size_t i) {
    size_t j = i;
    while (j < s.size() && (std::isalnum((unsigned char) s[j]) || s[j] == '.' || s[j] == '_' || s[j] == '-')) ++j;
    if (j == i || j >= s.size() || s[j] != '=') return false;
    for (const char * type : {"int:", "float:", "bool:", "str:"}) {
        if (s.compare(j + 1, std::strlen(type), type) == 0) return true;
    }
    return false;
}

}  // namespace

std::vector<KvOverride> parse_kv_overrides(const std::string & value) {
    std::vector<KvOverride> out;
    size_t start = 0;
    for (size_t i = 0; i <= value.size(); ++i) {
        if (i == value.size() || (value[i] == ',' && override_starts_at(value, i + 1))) {
            out.push_back(parse_kv_override(value.substr(start, i - start)));
            start = i + 1;
        }
    }
    return out;
}

KvOverride parse_kv_override(const std::string & spec) {
    const size_t eq = spec.find('=');
    const size_t colon = eq == std::string::npos ? std::string::npos : spec.find(':', eq + 1);
    if (eq == std::string::npos || colon == std::string::npos) {
        throw ModelError("--override-kv " + spec + ": expected KEY=TYPE:VALUE (TYPE: int, float, bool or str)");
    }
    KvOverride o{spec.substr(0, eq), spec.substr(eq + 1, colon - eq - 1), spec.substr(colon + 1)};
    check_syntax(o, "");
    return o;
}

std::vector<AppliedOverride> apply_kv_overrides(gguf_context * ctx, const std::vector<KvOverride> & overrides,
                                                const std::string & path) {
    // Prefixes map to the architecture the file will have once the overrides are applied.
    std::string arch;
    const int64_t arch_id = gguf_find_key(ctx, "general.architecture");
    if (arch_id >= 0 && gguf_get_kv_type(ctx, arch_id) == GGUF_TYPE_STRING) arch = gguf_get_val_str(ctx, arch_id);
    for (const KvOverride & o : overrides) {
        if (o.key == "general.architecture" && o.type == "str") arch = o.value;
    }
    std::vector<AppliedOverride> applied;
    for (const KvOverride & o : overrides) {
        const std::string key = map_arch_prefix(o.key, arch);
        const bool new_key = gguf_find_key(ctx, key.c_str()) < 0;
        apply_one(ctx, o, key, path + ": ");
        applied.push_back(AppliedOverride{KvOverride{key, o.type, o.value}, new_key});
    }
    return applied;
}

namespace {

// Levenshtein distance of a and b (for the nearest known key of a misspelt one).
size_t edit_distance(const std::string & a, const std::string & b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

}  // namespace

void check_override_keys(const gguf_context * ctx, const std::vector<AppliedOverride> & applied,
                         const std::string & arch, const std::set<std::string> & asked, const std::string & path) {
    const std::string ns = arch + ".";
    for (const AppliedOverride & a : applied) {
        const std::string & key = a.kv.key;
        if (!a.new_key || key.compare(0, ns.size(), ns) != 0 || asked.count(key)) continue;
        std::set<std::string> known(asked);  // what the loader looks up and what the file had
        for (int64_t i = 0; i < gguf_get_n_kv(ctx); ++i) known.insert(gguf_get_key(ctx, i));
        for (const AppliedOverride & b : applied) {
            if (b.new_key) known.erase(b.kv.key);
        }
        std::string nearest;
        size_t best = SIZE_MAX;
        for (const std::string & k : known) {
            const size_t d = k.compare(0, ns.size(), ns) == 0 ? edit_distance(k, key) : SIZE_MAX;
            if (d < best) best = d, nearest = k;
        }
        if (best > 3) nearest.clear();  // a misspelling is a few edits away; anything else is no hint
        bad(path + ": ", a.kv, "the file has no key " + key + " and " + arch + " reads none of that name, so it would "
            "change nothing" + (nearest.empty() ? std::string() : " (did you mean " + nearest + "?)"));
    }
}

}  // namespace glm5next
