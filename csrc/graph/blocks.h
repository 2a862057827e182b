// The blocks glm5next graphs are made of (model.md): mHC pre/post, KDA, DSA sparse MLA with the kpool indexer,
// dense and MoE SwiGLU FFN. The trunk graph (trunk.cpp) and the NextN draft head (draft_head.cpp) share them.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "ggml.h"
#include "graph/inputs.h"
#include "graph/layer_cache.h"
#include "graph/select_ops.h"
#include "model/hparams.h"
#include "model/layer_weights.h"

namespace glm5next {

// What the custom ops of one graph point to; must stay alive (and not move) until the graph is computed.
struct GraphParams {
    KpoolParams kpool;       // the ubatch's own rows
    KpoolParams kpool_saved; // a reused selection's row (the draft head's step 0, for index sharing)
    MoeRouteParams moe;
    float indexer_scale = 0.0f;    // 1/sqrt(index_head_dim), for indexer_scores
    float attention_scale = 0.0f;  // 1/sqrt(qk head dim), for sparse_attention
};

// A DSA layer's choice of keys: the chosen pools i32 [n_top_pool, n_rows] of the rows `at` describes, and what
// attention needs of them (built on first use, so a "shared" layer reuses them): for a large ubatch the mask
// f32 [n_kv, n_rows] over all cached rows; for a small one the gathered row indices and their mask. `std_ops`:
// the pools came from ggml's standard ops (graph/select_std.h) and their rows are gathered the same way.
struct Selection {
    ggml_tensor * pools = nullptr;
    const KpoolParams * at = nullptr;
    bool std_ops = false;
    ggml_tensor * mask = nullptr;
    ggml_tensor * rows = nullptr;
    ggml_tensor * rows_mask = nullptr;
};

// Up to this many rows per ubatch, attention gathers each row's selected keys (cost ~ index_topk per row); above
// it, one masked pass over every cached row serves all rows at once, until the context holds kSparseMinKeyRatio
// times the rows a query selects: from there a prefill ubatch gathers too (sparse prefill: its cost stays
// ~index_topk per row at any depth instead of growing with it). On the CPU the selected rows are read where the
// cache holds them (graph/sparse_attention_ops.h); with ggml's standard ops (a layer on another device) they are
// copied out, in chunks of at most kGatherChunkRows rows whose gathered keys take at most kGatherChunkBytes, or in
// kGatherMaxChunks chunks when that makes them longer (the graph's node budget, graph_size).
constexpr int64_t kGatherMaxRows = 16;
constexpr int64_t kSparseMinKeyRatio = 4;
constexpr int64_t kGatherChunkBytes = 64ll << 20;
constexpr int64_t kGatherMaxChunks = 16;
constexpr int64_t kGatherChunkRows = 64;

// Ubatches of up to this many rows multiply row by row on the CPU (BlockBuilder::mm: batch-invariant verify passes).
constexpr int64_t kInvariantMaxRows = kGatherMaxRows;

// The most keys (n_past + ubatch rows) a ubatch of more than kGatherMaxRows rows attends densely; past it, it
// gathers. The dense pass's buffers grow with the keys, so a ubatch's compute buffers peak here or at the end of
// the context (Engine::reserve sizes them for both).
inline int64_t max_dense_keys(const HParams & hp) {
    const int64_t kpool = hp.idx_kpool;
    return kSparseMinKeyRatio * (hp.idx_top_k / kpool * kpool + (hp.idx_select_tail ? kpool - 1 : 0)) - 1;
}

// Nodes a glm5next graph (trunk or draft head) needs at most, for sizing the context and the graph.
inline size_t graph_size(const HParams & hp) { return 2048 + 384 * (size_t) hp.n_layer_all; }

// The indexer scores the complete pools rounded up to a multiple of this many (the rest are no candidates, see
// kpool_top_k), so that a decode graph keeps its shape for kPoolBucket * kpool steps and is reused (Engine) instead
// of rebuilt every kpool steps (llama.cpp pads its KV cache view to 256 rows for the same reason). Scoring a pool
// costs idx_n_head * idx_head_dim multiply-adds (1024 on the bench preset): 63 extra pools cost ~0.1% of a decode
// step there.
constexpr int64_t kPoolBucket = 64;

// What a ubatch's graph structure depends on besides its row count and the graph's flags: n_past enters only
// through it and through inputs set per ubatch (InputCacheRows, the custom ops' KpoolParams), so that equal
// layouts share one graph (Engine's graph reuse; llama.cpp's llm_graph_result::can_reuse).
struct GraphLayout {
    int64_t n_kv = 0;    // keys of the masked dense pass (n_past + n_rows); 0: each row gathers its selected keys
    int64_t n_pool = 1;  // pooled keys the indexer scores: the complete pools, rounded up to kPoolBucket (>= 1)
    bool operator==(const GraphLayout & o) const { return n_kv == o.n_kv && n_pool == o.n_pool; }
};

// The layout of n_rows rows at positions n_past.. of a cache of n_ctx rows: dense attention for more than
// kGatherMaxRows rows while n_past + n_rows <= max_dense_keys, else gathering; the pools scored capped at the
// pooled cache's max(1, n_ctx / kpool) rows.
GraphLayout graph_layout(const HParams & hp, int64_t n_ctx, int64_t n_past, int64_t n_rows);

class BlockBuilder {
public:
    // `n_rows` rows laid out as `layout` says, written to the caches at the rows `cache_rows` holds; `row_scale`
    // f32 [1, n_rows] zeroes rows that select no key (nullptr when kpool_select_tail guarantees one).
    // `kpool_inputs` is the graph's input for selections made with ggml's standard ops, created here by the first
    // layer that needs it.
    BlockBuilder(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, GraphParams & params, int64_t n_rows,
                 const GraphLayout & layout, InputCacheRows & cache_rows, ggml_tensor * row_scale,
                 std::optional<InputKpoolRows> & kpool_inputs)
        : ctx(ctx), gf(gf), hp(hp), params(params), T(n_rows), layout(layout), cache_rows(cache_rows),
          row_scale(row_scale), kpool_inputs(kpool_inputs) {}

    // A builder for the ubatch's last n rows, for blocks that read and write no cache (rms, mm, the FFN and MoE):
    // where only those rows' outputs are read, the rows before them stop at the cache rows they wrote
    // (llama.cpp's inp_out_ids).
    BlockBuilder last_rows(int64_t n) const {
        BlockBuilder b = *this;
        b.T = n;
        b.row_scale = nullptr;
        return b;
    }

    // Keep per-row KDA snapshots in `out` (verify passes).
    void keep_snapshots(std::vector<KdaSnapshots> * out) { snapshots = out; }

    // Whether the blocks built next use this project's CPU kernels for the mHC steps, MoE routing and the
    // indexer's choices (graph/mhc_ops.h, graph/select_ops.h: faster on the CPU, exact ties to the lower index) or
    // ggml's standard ops (every device has them; graph/select_std.h says what can differ). A layer whose weights
    // live on another device uses ggml's, so that those steps run there instead of crossing to the CPU and back.
    // (A large ubatch's dense attention mask and a reused selection's rows are always made by our CPU kernels.)
    void use_cpu_kernels(bool on) { cpu_kernels = on; }

    ggml_tensor * rms(ggml_tensor * x, ggml_tensor * w) const;

    // ggml_mul_mat(w, x) for x whose columns are the ubatch's rows (x [K, n_rows, B]; w [K, M] or [K, M, B]),
    // such that a row's result does not depend on how many rows share a small ubatch (issue 15, batch-invariant
    // verify). ggml's CPU backend multiplies a single column with its vec_dot kernels and two or more with llamafile's
    // tinyBLAS (ggml-cpu.c: llamafile_sgemm declines n < 2), which round differently: on the bench preset's widths
    // (q8_0) a decode token's logits and the same row's in a verify pass differed by up to 1.6, and greedy draft-MTP
    // output differed from plain decoding. So on the CPU a ubatch of 2..kInvariantMaxRows rows (verify passes, short
    // prompts) is multiplied as ggml_mul_mat_id with every row routed to the one matrix (or to its batch's matrix),
    // whose kernel is the same vec_dot per row: a decode row equals its verify row bit for bit. Measured on the bench
    // preset (q8_0, -t 1, interleaved medians): verify passes of 2..6 rows took 0.76-0.91x the time of tinyBLAS's, and
    // decode is untouched. Larger ubatches (prefill) keep tinyBLAS, several times faster there.
    ggml_tensor * mm(ggml_tensor * w, ggml_tensor * x) const;

    // mHC pre (model.md step 1): the block input [n_embd, T]; post [hc, T] and comb [hc, hc, T] for hc_post.
    ggml_tensor * hc_pre(ggml_tensor * x, ggml_tensor * fn, ggml_tensor * scale, ggml_tensor * base,
                         ggml_tensor ** post, ggml_tensor ** comb) const;
    // mHC post (model.md step 3): the streams [n_embd, hc, T] after a block with output x [n_embd, T].
    ggml_tensor * hc_post(ggml_tensor * x, ggml_tensor * residual, ggml_tensor * post, ggml_tensor * comb) const;

    ggml_tensor * swiglu(ggml_tensor * x, ggml_tensor * wg, ggml_tensor * wu, ggml_tensor * wd, float limit) const;
    ggml_tensor * moe(ggml_tensor * x, const LayerWeights & w, int il) const;
    ggml_tensor * kda(ggml_tensor * x, const LayerWeights & w, const LayerCache & c) const;

    // Sparse MLA. With `run_indexer` the layer's own indexer fills `sel`; otherwise `sel` is attended as given.
    ggml_tensor * dsa(ggml_tensor * x, const LayerWeights & w, const LayerCache & c, bool run_indexer,
                      Selection & sel) const;

private:
    // Attention of rows [r0, r0 + n) of the ubatch over their gathered keys: o [head_v, 1, n_head, n].
    // i32 [n_experts, n_cols] whose every column is 0, 1, ..., n_experts - 1 (mm's routing of rows to matrices),
    // made once per graph and shape (expert_ids_).
    ggml_tensor * expert_ids(int64_t n_experts, int64_t n_cols) const;
    ggml_tensor * attend_gathered(ggml_tensor * q_abs, const LayerWeights & w, ggml_tensor * latent,
                                  const Selection & sel, int64_t r0, int64_t n) const;
    // Writes src's columns into rows of `cache` (i64 `rows`; the ubatch's positions for write_rows), appended now so
    // that the write runs before any later node reads the cache.
    void write_rows(ggml_tensor * src, ggml_tensor * cache) const;
    ggml_tensor * glu(ggml_tensor * gate, ggml_tensor * up) const;
    void write_rows_at(ggml_tensor * src, ggml_tensor * cache, ggml_tensor * rows) const;
    ggml_tensor * conv(ggml_tensor * x, ggml_tensor * proj, ggml_tensor * kernel, ggml_tensor * conv_cache, int part,
                       ggml_tensor ** xt_out) const;
    Selection indexer(ggml_tensor * x, ggml_tensor * qr, const LayerWeights & w, const LayerCache & c) const;
    void route(ggml_tensor * logits, ggml_tensor * bias, ggml_tensor ** ids, ggml_tensor ** wts) const;

    ggml_context * ctx;
    ggml_cgraph * gf;
    const HParams & hp;
    GraphParams & params;
    int64_t T;
    GraphLayout layout;
    InputCacheRows & cache_rows;
    ggml_tensor * row_scale;
    std::optional<InputKpoolRows> & kpool_inputs;
    std::vector<KdaSnapshots> * snapshots = nullptr;
    bool cpu_kernels = true;
    mutable std::vector<std::pair<std::pair<int64_t, int64_t>, ggml_tensor *>> expert_ids_;  // (n_experts, n_cols)
};

}  // namespace glm5next
