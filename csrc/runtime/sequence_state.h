// One sequence as bytes and back (llama.cpp's llama_state_seq_get_data / set_data): what llama-server's slot files
// (--slot-save-path, POST /slots/{id}?action=save|restore) and its RAM prompt cache (--cache-ram) hold. Everything
// a later prompt needs to resume from the sequence as the engine would from its own (docs/runtime.md, prompt cache):
// the tokens, the trunk's and the NextN layer's cache rows, the hidden state of the last row, how far the draft
// rows follow the trunk, and the context checkpoints.
//
// Format (little-endian, as the host writes it; version 3):
//   "GLM5NSEQ", u32 version,
//   u32 n_tokens, i32 tokens[n_tokens],
//   rows(trunk), u8 has_draft, [rows(draft)],
//   floats(last_hidden), i64 draft_from_trunk,
//   u32 n_checkpoints, per checkpoint: u32 n_past, floats(kda), floats(hidden), floats(logits)
// where rows(c) = u32 n_past, u32 n_tensors, per tensor: u32 ggml type, u64 n_bytes, bytes (its rows in its own
// type: -ctk's for the latent and indexer rows, f32 for the pooled keys and KDA); floats(v) = u64 count,
// f32 v[count].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/checkpoints.h"
#include "runtime/seq_cache.h"

namespace glm5next {

struct SequenceState {
    std::vector<int32_t> tokens;        // one per trunk row
    CacheRows trunk;
    bool has_draft = false;             // the engine has a NextN layer
    CacheRows draft;                    // its rows (has_draft)
    std::vector<float> last_hidden;     // [n_embd] post-norm hidden state of row n_past-1 (empty when n_past = 0)
    int64_t draft_from_trunk = 0;       // draft rows [0, this) were written from trunk hidden states
    std::vector<Checkpoint> checkpoints;  // ascending n_past
};

// The bytes of `state` in the format above.
std::vector<uint8_t> serialize(const SequenceState & state);

// The state `data` holds. Checks the format only (magic, version, every length within the data, nothing after
// the end); whether it fits a sequence is Sequence::load_state's check. Throws std::invalid_argument saying what is
// wrong and at which byte.
SequenceState deserialize(const uint8_t * data, size_t size);

}  // namespace glm5next
