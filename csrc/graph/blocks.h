// The blocks glm5next graphs are made of (docs/model.md): mHC pre/post, KDA, DSA sparse MLA with the kpool indexer,
// dense and MoE SwiGLU FFN. The trunk graph (trunk.cpp) and the NextN draft head (draft_head.cpp) share them.
#pragma once

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "ggml.h"
#include "graph/inputs.h"
#include "graph/layer_cache.h"
#include "graph/parts.h"
#include "graph/select_ops.h"
#include "model/hparams.h"
#include "model/layer_weights.h"

namespace glm5next {

// What the custom ops of one graph point to besides its parts' KpoolParams; must stay alive (and not move) until
// the graph is computed.
struct GraphParams {
    MoeRouteParams moe;
    float indexer_scale = 0.0f;    // 1/sqrt(index_head_dim), for indexer_scores
    float attention_scale = 0.0f;  // 1/sqrt(qk head dim), for sparse_attention
};

// A DSA layer's choice of keys for one part: the chosen pools i32 [n_top_pool, n_rows] of the rows `at` describes,
// and what attention needs of them (built on first use, so a "shared" layer reuses them): for a large ubatch the mask
// f32 [n_kv, n_rows] over all cached rows; for a small one the gathered row indices and their mask. `std_ops`:
// the pools came from ggml's standard ops (graph/select_std.h) and their rows are gathered the same way.
struct Selection {
    ggml_tensor * pools = nullptr;
    const KpoolParams * at = nullptr;
    bool std_ops = false;
    ggml_tensor * mask = nullptr;
    ggml_tensor * rows = nullptr;
    ggml_tensor * rows_mask = nullptr;
    // the pools (and rows) of every part of the group at once, [.., group rows] (RowGroup::selects_at_once): every
    // part holds the same Selection
    bool whole_group = false;
};

// Up to this many rows per ubatch, attention gathers each row's selected keys (cost ~ index_topk per row); above
// it, one masked pass over every cached row serves all rows at once (its mask made where the layer runs: kpool_mask
// on the CPU, kpool_mask_std on another device, where gathering instead gave 0.81-0.89x the prefill rate over RPC,
// bench preset q8_0, pp512), until the context holds kSparseMinKeyRatio times the rows a query selects: from there a prefill ubatch
// gathers too (sparse prefill: its cost stays ~index_topk per row at any depth instead of growing with it). On the
// CPU the selected rows are read where the cache holds them (graph/sparse_attention_ops.h); with ggml's standard
// ops (a layer on another device) they are
// copied out, in chunks of at most kGatherChunkRows rows whose gathered keys take at most kGatherChunkBytes, or in
// kGatherMaxChunks chunks when that makes them longer (the graph's node budget, graph_size).
constexpr int64_t kGatherMaxRows = 16;
constexpr int64_t kSparseMinKeyRatio = 4;
constexpr int64_t kGatherChunkBytes = 64ll << 20;
constexpr int64_t kGatherMaxChunks = 16;
constexpr int64_t kGatherChunkRows = 64;

// A dense pass attends over its n_kv keys padded to a multiple of this many by the cache rows after them, which its
// mask hides (kpool_mask, kpool_mask_std: masked but at the selected rows, all before n_kv; the probabilities there
// are exact zeros, and the cache holds finite values there, zeros from its allocation or rows written before).
// Why: the probabilities times the keys share the key dimension, and llamafile's tinyBLAS multiplies f32 only where
// that is a multiple of its vector width (8 floats with AVX2, 16 with AVX-512: sgemm.cpp, tinyBLAS::matmul);
// otherwise ggml's CPU vec_dot multiplies value by value, about half as fast (bench preset q8_0, AVX2, a 214-row
// prompt chunk: the op profile's f32 products 72 -> 43 ms of ~750). On every device alike, so that a layer placed on
// another device (a CPU over RPC) multiplies as the CPU does (llama.cpp pads its KV cache view to 256 rows).
constexpr int64_t kDenseKeysPad = 16;
static_assert((kDenseKeysPad & (kDenseKeysPad - 1)) == 0, "GGML_PAD pads to powers of two");

// Ubatches of up to this many rows multiply row by row (BlockBuilder::mm: batch-invariant verify passes).
constexpr int64_t kInvariantMaxRows = kGatherMaxRows;

// The most keys (n_past + ubatch rows) a ubatch of more than kGatherMaxRows rows attends densely; past it, it
// gathers. The dense pass's buffers grow with the keys, so a ubatch's compute buffers peak here or at the end of
// the context (Engine::reserve sizes them for both).
inline int64_t max_dense_keys(const HParams & hp) {
    const int64_t kpool = hp.idx_kpool;
    return kSparseMinKeyRatio * (hp.idx_top_k / kpool * kpool + (hp.idx_select_tail ? kpool - 1 : 0)) - 1;
}

// Nodes a glm5next graph (trunk or draft head) of n_parts sequences' rows needs at most, for sizing the context and
// the graph.
inline size_t graph_size(const HParams & hp, size_t n_parts = 1) {
    return (2048 + 384 * (size_t) hp.n_layer_all) * std::max<size_t>(1, n_parts);
}

// The indexer scores the complete pools rounded up to a multiple of this many (the rest are no candidates, see
// kpool_top_k), so that a decode graph keeps its shape for kPoolBucket * kpool steps and is reused (Engine) instead
// of rebuilt every kpool steps (llama.cpp pads its KV cache view to 256 rows for the same reason). Scoring a pool
// costs idx_n_head * idx_head_dim multiply-adds (1024 on the bench preset): 63 extra pools cost ~0.1% of a decode
// step there.
constexpr int64_t kPoolBucket = 64;
static_assert((kPoolBucket & (kPoolBucket - 1)) == 0, "GGML_PAD pads to powers of two");

// The layout of n_rows rows at positions n_past.. of a cache of n_ctx rows: dense attention for more than
// kGatherMaxRows rows while n_past + n_rows <= max_dense_keys, else gathering; the pools scored capped at the
// pooled cache's HParams::n_pooled(n_ctx) rows.
GraphLayout graph_layout(const HParams & hp, int64_t n_ctx, int64_t n_past, int64_t n_rows);

// Builds the blocks of one row group (graph/parts.h): what reads no cache runs over the group's rows at once,
// what reads or writes a sequence's caches (KDA, the indexer, attention) per part on its own rows.
class BlockBuilder {
public:
    // The blocks of `group`, whose parts' caches and inputs (InputCacheRows, InputKpoolRows) the builder fills in.
    BlockBuilder(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, GraphParams & params, RowGroup & group)
        : ctx(ctx), gf(gf), hp(hp), params(params), group(&group), T(group.n_rows), few(group.few) {}

    // A builder for n rows taken out of the group (each part's last row, say), for blocks that read and write no
    // cache (rms, mm, the FFN and MoE): where only those rows' outputs are read, the rows before them stop at the
    // cache rows they wrote (llama.cpp's inp_out_ids). Its rows multiply as a few-row group's.
    BlockBuilder out_rows(int64_t n) const {
        BlockBuilder b = *this;
        b.group = nullptr;
        b.T = n;
        b.few = true;
        return b;
    }

    // Whether the blocks built next use this project's CPU kernels for the mHC steps, MoE routing and the
    // indexer's choices (graph/mhc_ops.h, graph/select_ops.h: faster on the CPU, exact ties to the lower index) or
    // ggml's standard ops (every device has them; graph/select_std.h says what can differ). A layer whose weights
    // live on another device uses ggml's, so that those steps run there instead of crossing to the CPU and back:
    // a reused selection's rows and a large ubatch's dense attention mask too (kpool_rows_std, kpool_mask_std).
    void use_cpu_kernels(bool on) { cpu_kernels = on; }
    // Whether a DSA layer of a group whose parts allow it (RowGroup::selects_at_once) on a GPU backend selects and
    // attends for all its parts with one node set (the trunk's: its parts read their selections from the group's,
    // GraphPart::selections) instead of one per part (off: the draft head, which reads each part's own).
    void select_groups_at_once(bool on) { groups_at_once = on; }
    // Whether a DSA layer of weights `w` selects and attends for every part of the group at once (issue 48): on,
    // RowGroup::selects_at_once, a GPU backend (ggml's standard ops, products of all rows at once). Then each
    // part's Selection is the group's (Selection::whole_group), made by the layer's indexer or given so.
    bool attends_at_once(const LayerWeights & w) const;

    // RMSNorm of x's rows times w (nullptr: no weight; docs/model.md): by rms_norm_f32 for f32 in a layer built with
    // CPU kernels (graph/norm_ops.h: ggml's arithmetic, its sum vectorized), else ggml's RMS_NORM and MUL.
    ggml_tensor * rms(ggml_tensor * x, ggml_tensor * w) const;
    // KDA's L2 normalization of x's rows (q and k per head; docs/model.md, KDA), by l2_norm_f32 or ggml's ops alike.
    ggml_tensor * l2(ggml_tensor * x) const;
    // The pieces joined along dimension `dim` in order (ggml_concat's result; the one piece itself when there is
    // one): f32 pieces in a layer built with CPU kernels by concat_f32 (graph/concat_ops.h: one node, rows copied by
    // every thread), others by ggml_concat, one node per piece but the first.
    ggml_tensor * concat(const std::vector<ggml_tensor *> & pieces, int dim) const;

    // ggml_mul_mat(w, x) for x whose columns are rows (x [K, n_rows, B]; w [K, M] or [K, M, B]), such that a row's
    // result does not depend on the rows it is multiplied with (issue 15, batch-invariant verify; issue 24, rows of
    // several sequences). ggml's CPU backend multiplies a single column with its vec_dot kernels and two or more
    // with llamafile's tinyBLAS (ggml-cpu.c: llamafile_sgemm declines n < 2), which round differently: on the bench
    // preset's widths (q8_0) a decode token's logits and the same row's in a verify pass differed by up to 1.6, and
    // greedy draft-MTP output differed from plain decoding. So the rows of a few-row group (verify passes, draft
    // steps, the decode rows of several sequences, short prompts) and up to kInvariantMaxRows rows of a long part are
    // multiplied each as vec_dot multiplies a row alone: a q8_0 matrix on the CPU by this project's kernel
    // (graph/q8_0_rows_ops.h, the same bits, each weight block loaded once for up to 8 rows; the routed experts
    // too, mm_id), an f16 or f32 one by its counterpart (graph/float_rows_ops.h, each weight row loaded once for up
    // to 4 rows), other types (and a plain RPC device's products) as ggml_mul_mat_id with every row routed to the
    // one matrix (or to its batch's matrix), whose CPU kernel is the same vec_dot per row whatever the row count
    // (ggml_compute_forward_mul_mat_id_one_chunk). A decode row equals its verify row, and its row in a batch of
    // sequences, bit for bit. Measured on the bench preset (q8_0, -t 1, interleaved medians): mul_mat_id's verify
    // passes of 2..6 rows took 0.76-0.91x the time of tinyBLAS's; with the q8_0 kernel (-t 2, glm5next-bench -npl
    // against llama.cpp in one run) 4 sequences' decode went from 1.11x to 1.70x llama.cpp's tokens/s, and the
    // routed experts' kernel alone made one sequence's prefill 1.38x and decode 1.07x faster (interleaved medians of
    // 6). Long prompt chunks keep tinyBLAS for the dense matrices, several times faster there. A plain RPC device
    // (a CPU) takes the same route, exact there (tests/csrc/test_devices.py, where a multi-row product parted greedy
    // draft-MTP from plain decoding on a q8_0 file). A matrix on a GPU backend is multiplied plainly, all rows in
    // one product (model/kernel_limits.h, multiplies_rows_alone): there the one-expert MUL_MAT_ID of a float matrix
    // whose rows are not a multiple of 32 (mHC's hc_fn, KDA's beta, the indexer's head weights) took ggml-cuda's
    // synchronizing fallback and turned CUDA graphs off for every step of several rows (the graph census,
    // runtime/graph_census.h), and a GPU's kernels keep no row's bits alone either way (scripts/gpu_check.sh
    // compares greedy draft-MTP with plain decoding there).
    ggml_tensor * mm(ggml_tensor * w, ggml_tensor * x) const;

    // mHC pre (docs/model.md, "Trunk, one layer", step 1): the block input [n_embd, T]; post [hc, T] and comb
    // [hc, hc, T] for hc_post.
    ggml_tensor * hc_pre(ggml_tensor * x, ggml_tensor * fn, ggml_tensor * scale, ggml_tensor * base,
                         ggml_tensor ** post, ggml_tensor ** comb) const;
    // mHC post (docs/model.md, "Trunk, one layer", step 3): the streams [n_embd, hc, T] after a block with
    // output x [n_embd, T].
    ggml_tensor * hc_post(ggml_tensor * x, ggml_tensor * residual, ggml_tensor * post, ggml_tensor * comb) const;

    ggml_tensor * swiglu(ggml_tensor * x, ggml_tensor * wg, ggml_tensor * wu, ggml_tensor * wd, float limit) const;
    ggml_tensor * moe(ggml_tensor * x, const LayerWeights & w, int il) const;
    // KDA of layer il over the group's rows, each part on its own conv window and state (and its snapshots when it
    // keeps them), or all parts at once on the states in their cells (RowGroup::kda_over_cells).
    ggml_tensor * kda(ggml_tensor * x, const LayerWeights & w, uint32_t il) const;

    // Sparse MLA of layer il. `sels` holds one Selection per part of the group: with `run_indexer` the layer's
    // own indexer fills those without pools; the others (all of them without run_indexer) are attended as given.
    // `attend_rows` false: the rows' cache rows (latent, indexer keys, pooled keys) are written and nothing else
    // is built (rows whose output nobody reads); returns null then.
    ggml_tensor * dsa(ggml_tensor * x, const LayerWeights & w, uint32_t il, bool run_indexer,
                      std::vector<Selection> & sels, bool attend_rows = true) const;

private:
    // ggml_mul_mat_id(w, x, ids) (the routed experts' products), through rows_mul_mat where rows_kernel(w) (an f16
    // or f32 expert's for up to kInvariantMaxRows rows of x).
    ggml_tensor * mm_id(ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids) const;
    // Whether products with w take one of this project's kernels for a few rows: a matrix on the CPU in a layer
    // built with CPU kernels, q8_0 (graph/q8_0_rows_ops.h) or f16/f32 (graph/float_rows_ops.h: float_rows_fit), on a
    // CPU that kernel runs on.
    bool rows_kernel(const ggml_tensor * w) const;
    // KDA's gated delta rule (ggml_gated_delta_net's arguments, q..beta of n_seqs sequences, and K) over states kept
    // in `cache` (f32 rows of d*d*n_head values: one sequence's own state, `cells` null, or the engine's cells tensor,
    // `cells` i32 [n_seqs] the rows of the sequences), which it leaves holding the states after the last token: this
    // project's op in place where the cache is on the CPU in a layer built with CPU kernels and the op takes the head
    // size and runs here (graph/delta_rule_ops.h), else ggml's over the states gathered, its slot 0 written back.
    // Returns the op's result: the outputs, then K slots (slot 0, the final states, not written by this project's op).
    ggml_tensor * delta_rule_in_cache(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * g,
                                      ggml_tensor * beta, ggml_tensor * cache, ggml_tensor * cells, int64_t K) const;
    // That kernel's product (q8_0_mul_mat_rows or float_mul_mat_rows; their arguments).
    ggml_tensor * rows_mul_mat(ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids) const;
    // i32 [n_experts, n_cols] whose every column is 0, 1, ..., n_experts - 1 (mm's routing of rows to matrices),
    // made once per graph and shape (expert_ids_).
    ggml_tensor * expert_ids(int64_t n_experts, int64_t n_cols) const;
    // Attention of rows [r0, r0 + n) of a part over their gathered keys: o [head_v, 1, n_head, n].
    ggml_tensor * attend_gathered(ggml_tensor * q_abs, const LayerWeights & w, ggml_tensor * latent,
                                  const Selection & sel, int64_t r0, int64_t n) const;
    // Attention of one part's rows (q_abs [kvr, n_rows, nh] of its rows) over its caches: with `kqv_out` the CPU
    // path's latent-space output kqv [kvr, 1, nh, n_rows] (W_vb applied by the caller over the group), else o
    // [head_v, 1, nh, n_rows] (gathered with ggml's ops) or [head_v, nh, n_rows] (the dense pass).
    ggml_tensor * attend(ggml_tensor * q_abs, const LayerWeights & w, const LayerCache & c, GraphPart & part,
                         Selection & sel, bool * kqv_out) const;
    // Writes src's columns into rows of `cache` (i64 `rows`), appended now so that the write runs before any later
    // node reads the cache.
    void write_rows_at(ggml_tensor * src, ggml_tensor * cache, ggml_tensor * rows) const;
    ggml_tensor * glu(ggml_tensor * gate, ggml_tensor * up) const;
    // A part's causal depthwise conv (kernel [K, channels]) of its projected rows xp [channels, n_rows], with its
    // window carried in the cache (conv_cache [K-1, channels]), before the SiLU (kda applies it to all parts at
    // once); *xt_out: the window and the rows, [K-1+n, channels] (what a verify pass's rollback cuts the window
    // from).
    ggml_tensor * conv(ggml_tensor * xp, ggml_tensor * kernel, ggml_tensor * conv_cache, int64_t n_rows,
                       ggml_tensor ** xt_out) const;
    // kda's conv and gated delta rule of all the group's parts at once, on the states in their cells (blocks.cpp).
    ggml_tensor * conv_over_cells(ggml_tensor * proj, ggml_tensor * kernel, uint32_t il, ggml_tensor ** xt_out) const;
    ggml_tensor * delta_rule_over_cells(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * gate,
                                        ggml_tensor * beta, uint32_t il, ggml_tensor * xt) const;
    // The KDA snapshots of a verify pass's `parts` in layer il (blocks.cpp), added to each part's.
    void keep_snapshots(const std::vector<GraphPart *> & parts, uint32_t il, ggml_tensor * packed,
                        ggml_tensor * xt) const;
    ggml_tensor * index_rows(GraphPart & part, const LayerCache & c, const LayerWeights & w, ggml_tensor * ik,
                             ggml_tensor * ig) const;
    void index_rows_over_cells(const LayerCache & all, const LayerWeights & w, ggml_tensor * ik, ggml_tensor * ig) const;
    ggml_tensor * pooled_keys(const LayerCache & c, const LayerWeights & w, ggml_tensor * pool_rows) const;
    ggml_tensor * scored_pools(const GraphPart & part, const LayerCache & c) const;
    Selection select(GraphPart & part, ggml_tensor * pooled, ggml_tensor * iq, ggml_tensor * wts) const;
    // select and attend_gathered of every part at once, on the caches of all cells (`all`; the parts' cells
    // consecutive): one node set per layer instead of one per sequence (issue 48).
    Selection select_at_once(const LayerCache & all, uint32_t il, ggml_tensor * iq, ggml_tensor * wts) const;
    ggml_tensor * attend_at_once(ggml_tensor * q_abs, const LayerWeights & w, const LayerCache & all, uint32_t il,
                                 Selection & sel) const;
    // `rows` of a cache as f32: themselves for an f32 cache, else a widened copy (blocks.cpp says why).
    ggml_tensor * widened(ggml_tensor * rows) const;
    void route(ggml_tensor * logits, ggml_tensor * bias, ggml_tensor ** ids, ggml_tensor ** wts) const;

    ggml_context * ctx;
    ggml_cgraph * gf;
    const HParams & hp;
    GraphParams & params;
    RowGroup * group;  // null for out_rows' builders (no caches)
    int64_t T;         // rows
    bool few;          // a few-row group: every row multiplied as a row alone (mm)
    bool cpu_kernels = true;
    bool groups_at_once = false;
    mutable std::vector<std::pair<std::pair<int64_t, int64_t>, ggml_tensor *>> expert_ids_;  // (n_experts, n_cols)
};

}  // namespace glm5next
