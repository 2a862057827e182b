// Graph inputs that create their own tensor and fill it (llama.cpp's llm_graph_input_*: create while building,
// set_input once the graph is allocated). The engine hands each the data; the input knows its shape and layout.
#pragma once

#include <cstdint>

#include "ggml.h"
#include "graph/select_ops.h"
#include "model/hparams.h"

namespace glm5next {

// Token ids: i32 [n_rows].
struct InputTokens {
    ggml_tensor * t = nullptr;
    InputTokens(ggml_context * ctx, int64_t n_rows);
    void set_input(const int32_t * ids) const;
};

// Hidden states fed to the draft head: f32 [n_embd, n_rows] from row-major [n_rows, n_embd].
struct InputHidden {
    ggml_tensor * t = nullptr;
    InputHidden(ggml_context * ctx, int64_t n_embd, int64_t n_rows);
    void set_input(const float * rows) const;
};

// Pools a draft step reuses (index sharing): i32 [n_top_pool, 1].
struct InputSavedPools {
    ggml_tensor * t = nullptr;
    InputSavedPools(ggml_context * ctx, int64_t n_top_pool);
    void set_input(const int32_t * pools) const;
};

// f32 [1, n_rows]: 1 for a row that selects at least one key, 0 for one that selects none (only possible without
// kpool_select_tail; then its attention output is zero). Absent (t == nullptr) with the tail on.
struct InputRowScale {
    ggml_tensor * t = nullptr;
    InputRowScale(ggml_context * ctx, const HParams & hp, int64_t n_rows);
    void set_input(const KpoolParams & at) const;
};

}  // namespace glm5next
