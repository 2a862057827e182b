// Tokenizer metadata (docs/gguf.md, Tokenizer), read once at load so that a broken vocab fails there, by key.
#include <cstdint>

#include "model/vocab.h"

#include "model/error.h"
#include "model/gguf_keys.h"

namespace glm5next {

Vocab read_vocab(const gguf_context * ctx, const HParams & hp, const std::string & path) {
    const KeyReader kv(ctx, path, "");
    Vocab v;
    v.model = kv.get_str("tokenizer.ggml.model").value_or("");
    v.pre = kv.get_str("tokenizer.ggml.pre").value_or("");
    v.tokens = kv.get_str_array("tokenizer.ggml.tokens").value_or(std::vector<std::string>{});
    if (v.tokens.empty()) return v;  // ids-only file: nothing else to check
    if (v.tokens.size() != hp.n_vocab) {
        kv.fail("tokenizer.ggml.tokens", "has " + std::to_string(v.tokens.size()) + " entries, but " + hp.arch +
                                             ".vocab_size is " + std::to_string(hp.n_vocab));
    }
    // Absent types mean "all normal" (llama.cpp's default).
    const auto types = kv.get_int_array("tokenizer.ggml.token_type", INT32_MIN, INT32_MAX);
    v.types.assign(v.tokens.size(), 1);
    if (types) {
        if (types->size() != v.tokens.size()) {
            kv.fail("tokenizer.ggml.token_type", "has " + std::to_string(types->size()) + " entries, expected " +
                                                     std::to_string(v.tokens.size()) + " (one per token)");
        }
        v.types.assign(types->begin(), types->end());
    }
    v.merges = kv.get_str_array("tokenizer.ggml.merges").value_or(std::vector<std::string>{});

    const std::pair<const char *, const char *> specials[] = {
        {"bos", "tokenizer.ggml.bos_token_id"}, {"eos", "tokenizer.ggml.eos_token_id"},
        {"eot", "tokenizer.ggml.eot_token_id"}, {"eom", "tokenizer.ggml.eom_token_id"},
        {"unk", "tokenizer.ggml.unknown_token_id"}, {"pad", "tokenizer.ggml.padding_token_id"},
    };
    for (const auto & [name, key] : specials) {
        if (const auto id = kv.get_int(key, 0, int64_t(v.tokens.size()) - 1)) v.special[name] = int32_t(*id);
    }
    const int32_t kControl = 3;
    for (int32_t id = 0; id < (int32_t) v.tokens.size(); ++id) {
        const std::string & t = v.tokens[id];
        if (v.types[id] != kControl) continue;
        if (t == "<|system|>" || t == "<|user|>" || t == "<|assistant|>" || t == "<|observation|>") {
            v.message_starts.push_back(id);
            if (t == "<|user|>") v.user_start = id;
        }
    }
    return v;
}

}  // namespace glm5next
