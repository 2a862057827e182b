// The tokenizer a GGUF stores (tokenizer.ggml.*), read and checked at load.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gguf.h"
#include "model/hparams.h"

namespace glm5next {

// The tokenizer stored in the file (tokenizer.ggml.*), checked at load. `tokens` is empty when the file has none.
struct Vocab {
    std::string model, pre;                  // tokenizer.ggml.model / .pre, e.g. "gpt2" / "glm4" ("" when absent)
    std::vector<std::string> tokens;         // [n_vocab] token strings (byte-level BPE alphabet for normal tokens)
    std::vector<int32_t> types;              // [n_vocab] llama.cpp token types: 1 normal, 3 control, 4 user-defined, 5 unused
    std::vector<std::string> merges;         // BPE merges "left right", highest priority first
    std::map<std::string, int32_t> special;  // "bos", "eos", "eot", "eom", "unk", "pad" -> id, those present
    // The chat format's role tokens present as control tokens (GLM: <|system|>, <|user|>, <|assistant|>,
    // <|observation|>): a message of a rendered chat starts at one. Ascending ids; empty without a token list.
    std::vector<int32_t> message_starts;
    int32_t user_start = -1;  // <|user|>, or -1
};

// The tokenizer keys of `ctx` (all optional), checked against `hp`: token_type and the token list have
// n_vocab entries, special ids are within the vocab. Throws ModelError naming `path` and the key.
Vocab read_vocab(const gguf_context * ctx, const HParams & hp, const std::string & path);

}  // namespace glm5next
