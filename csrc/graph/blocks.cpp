#include "graph/blocks.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "graph/concat_ops.h"
#include "graph/delta_rule_ops.h"
#include "graph/float_rows_ops.h"
#include "graph/indexer_ops.h"
#include "graph/mhc_ops.h"
#include "graph/norm_ops.h"
#include "graph/q8_0_rows_ops.h"
#include "graph/sparse_attention_ops.h"
#include "graph/select_std.h"
#include "model/kernel_limits.h"
#include "model/model.h"

namespace glm5next {

GraphLayout graph_layout(const HParams & hp, int64_t n_ctx, int64_t n_past, int64_t n_rows) {
    GraphLayout l;
    const int64_t n_kv = n_past + n_rows, kpool = hp.idx_kpool;
    l.n_kv = n_rows <= kGatherMaxRows || n_kv > max_dense_keys(hp) ? 0 : n_kv;
    const int64_t complete = std::max<int64_t>(1, n_kv / kpool);  // pool 0 unwritten when none: never a candidate
    l.n_pool = std::min<int64_t>(GGML_PAD(complete, kPoolBucket), hp.n_pooled((uint32_t) n_ctx));
    return l;
}

void BlockBuilder::write_rows_at(ggml_tensor * src, ggml_tensor * cache, ggml_tensor * rows) const {
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, cache, src, rows));
}

ggml_tensor * BlockBuilder::rms(ggml_tensor * x, ggml_tensor * w) const {
    if (cpu_kernels && x->type == GGML_TYPE_F32 && (w == nullptr || w->type == GGML_TYPE_F32)) {
        return rms_norm_f32(ctx, x, w, &hp.rms_eps);
    }
    ggml_tensor * y = ggml_rms_norm(ctx, ggml_is_contiguous(x) ? x : ggml_cont(ctx, x), hp.rms_eps);
    return w ? ggml_mul(ctx, y, w) : y;
}

ggml_tensor * BlockBuilder::l2(ggml_tensor * x) const {
    const int64_t n = x->ne[0];
    if (cpu_kernels && x->type == GGML_TYPE_F32) return l2_norm_f32(ctx, x);
    return ggml_scale(ctx, ggml_rms_norm(ctx, x, l2_norm_eps(n)), l2_norm_scale(n));
}

ggml_tensor * BlockBuilder::concat(const std::vector<ggml_tensor *> & pieces, int dim) const {
    const bool f32 = std::all_of(pieces.begin(), pieces.end(), [](const ggml_tensor * t) { return t->type == GGML_TYPE_F32; });
    if (cpu_kernels && f32) return concat_f32(ctx, pieces, dim);
    ggml_tensor * out = pieces.at(0);
    for (size_t i = 1; i < pieces.size(); ++i) out = ggml_concat(ctx, out, pieces[i], dim);
    return out;
}

ggml_tensor * BlockBuilder::mm(ggml_tensor * w, ggml_tensor * x) const {
    const bool one_product = x->ne[1] == 1 || (!few && x->ne[1] > kInvariantMaxRows);
    if (one_product || !multiplies_rows_alone(w)) return ggml_mul_mat(ctx, w, x);
    const int64_t K = x->ne[0], N = x->ne[1], B = w->ne[2];
    if (B == 1 && w->ne[3] == 1) {  // one matrix
        ggml_tensor * xc = ggml_is_contiguous(x) ? x : ggml_cont(ctx, x);
        if (rows_kernel(w)) {
            ggml_tensor * r = rows_mul_mat(w, ggml_reshape_3d(ctx, xc, K, ggml_nelements(x) / K, 1), nullptr);
            return ggml_reshape_4d(ctx, r, w->ne[1], N, x->ne[2], x->ne[3]);
        }
        // every column of x a row routed to "expert" 0
        xc = ggml_reshape_3d(ctx, xc, K, 1, ggml_nelements(x) / K);
        ggml_tensor * r = ggml_mul_mat_id(ctx, ggml_reshape_3d(ctx, w, K, w->ne[1], 1), xc, expert_ids(1, xc->ne[2]));
        return ggml_reshape_4d(ctx, r, w->ne[1], N, x->ne[2], x->ne[3]);
    }
    // a matrix per batch (x [K, N, B]): batch b is "expert" b of every column
    ggml_tensor * xb = ggml_cont(ctx, ggml_permute(ctx, x, 0, 2, 1, 3));  // [K, B, N]
    ggml_tensor * ids = expert_ids(B, N);
    ggml_tensor * r = rows_kernel(w) ? rows_mul_mat(w, xb, ids) : ggml_mul_mat_id(ctx, w, xb, ids);  // [M, B, N]
    return ggml_cont(ctx, ggml_permute(ctx, r, 0, 2, 1, 3));               // [M, N, B]
}

ggml_tensor * BlockBuilder::mm_id(ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids) const {
    // the f16/f32 kernel widens x on every thread: a few rows only (f16 experts of a prompt ubatch take ggml's
    // mul_mat_id, the same vec_dot per row); the q8_0 one quantizes many rows once, in the graph. (mm's products
    // are of a few-row group or of up to kInvariantMaxRows rows: they take the kernels without this bound.)
    const bool ours = rows_kernel(w) && (w->type == GGML_TYPE_Q8_0 || ggml_nrows(x) <= kInvariantMaxRows);
    return ours ? rows_mul_mat(w, x, ids) : ggml_mul_mat_id(ctx, w, x, ids);
}

bool BlockBuilder::rows_kernel(const ggml_tensor * w) const {
    if (!cpu_kernels || !on_cpu(w)) return false;
    if (w->type == GGML_TYPE_Q8_0) return q8_0_rows_kernel_available();
    return float_rows_fit(w) && float_rows_kernel_available(w->type);
}

ggml_tensor * BlockBuilder::delta_rule_in_cache(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * g,
                                                ggml_tensor * beta, ggml_tensor * cache, ggml_tensor * cells,
                                                int64_t K) const {
    if (cpu_kernels && on_cpu(cache) && delta_rule_fits(v->ne[0]) && delta_rule_kernel_available()) {
        return delta_rule_in_place(ctx, q, k, v, g, beta, cache, cells, K);
    }
    const int64_t d = v->ne[0], nh = v->ne[1], n_tokens = v->ne[2], n_seqs = v->ne[3];
    ggml_tensor * rows = ggml_reshape_2d(ctx, cache, d * d * nh, ggml_nelements(cache) / (d * d * nh));
    ggml_tensor * states = ggml_reshape_4d(ctx, cells ? ggml_get_rows(ctx, rows, cells) : rows, d, d, nh, n_seqs);
    ggml_tensor * packed = ggml_gated_delta_net(ctx, q, k, v, g, beta, states, K);
    // after the outputs: slot 0, the final state of each sequence
    ggml_tensor * final_states = ggml_view_2d(ctx, packed, d * d * nh, n_seqs, d * d * nh * sizeof(float),
                                              d * nh * n_tokens * n_seqs * sizeof(float));
    ggml_build_forward_expand(gf, cells ? ggml_set_rows(ctx, rows, final_states, cells)
                                        : ggml_cpy(ctx, final_states, rows));
    return packed;
}

ggml_tensor * BlockBuilder::rows_mul_mat(ggml_tensor * w, ggml_tensor * x, ggml_tensor * ids) const {
    return w->type == GGML_TYPE_Q8_0 ? q8_0_mul_mat_rows(ctx, w, x, ids) : float_mul_mat_rows(ctx, w, x, ids);
}

ggml_tensor * BlockBuilder::expert_ids(int64_t n_experts, int64_t n_cols) const {
    for (const auto & [shape, ids] : expert_ids_) {  // a graph needs a few shapes, each in every layer
        if (shape.first == n_experts && shape.second == n_cols) return ids;
    }
    // i32 [n_experts, n_cols], column j = 0..n_experts-1: the ascending order of an ascending row
    ggml_tensor * row = ggml_arange(ctx, 0.0f, (float) n_experts, 1.0f);
    ggml_tensor * ids = ggml_argsort(ctx, ggml_repeat_4d(ctx, row, n_experts, n_cols, 1, 1), GGML_SORT_ORDER_ASC);
    expert_ids_.push_back({{n_experts, n_cols}, ids});
    return ids;
}

ggml_tensor * BlockBuilder::hc_pre(ggml_tensor * x, ggml_tensor * fn, ggml_tensor * scale, ggml_tensor * base,
                     ggml_tensor ** post, ggml_tensor ** comb) const {
    const int64_t hc = hp.hc_mult, n_embd = hp.n_embd;
    ggml_tensor * flat = rms(ggml_reshape_2d(ctx, x, n_embd * hc, T), nullptr);
    ggml_tensor * mixes = mm(fn, flat);  // [(2+hc)*hc, T]
    *comb = ggml_dsv4_hc_comb(ctx, mixes, scale, base, hp.hc_eps, (int32_t) hp.hc_sinkhorn_iters);
    if (cpu_kernels) {
        ggml_tensor * gates = hc_gates(ctx, mixes, scale, base, hc, &hp.hc_eps);  // [2*hc, T]: pre, post
        ggml_tensor * pre = ggml_view_2d(ctx, gates, hc, T, gates->nb[1], 0);
        *post = ggml_view_2d(ctx, gates, hc, T, gates->nb[1], hc * sizeof(float));
        return hc_mix_kernels_available() ? hc_pre_mix(ctx, x, pre) : ggml_dsv4_hc_pre(ctx, x, pre);
    }
    // ggml's standard ops, which every device has: the same formulas as hc_gates and hc_pre_mix (mhc_ops.h)
    auto affine = [&](int part, int64_t off) {
        ggml_tensor * v = ggml_view_2d(ctx, mixes, hc, T, mixes->nb[1], off * sizeof(float));
        v = ggml_mul(ctx, v, ggml_view_1d(ctx, scale, 1, part * sizeof(float)));
        return ggml_add(ctx, v, ggml_view_1d(ctx, base, hc, off * sizeof(float)));
    };
    ggml_tensor * pre = ggml_scale_bias(ctx, ggml_sigmoid(ctx, affine(0, 0)), 1.0f, hp.hc_eps);
    *post = ggml_scale(ctx, ggml_sigmoid(ctx, affine(1, hc)), 2.0f);
    return ggml_dsv4_hc_pre(ctx, x, pre);
}

ggml_tensor * BlockBuilder::hc_post(ggml_tensor * x, ggml_tensor * residual, ggml_tensor * post, ggml_tensor * comb) const {
    return cpu_kernels && hc_mix_kernels_available() ? hc_post_mix(ctx, x, residual, post, comb)
                                                     : ggml_dsv4_hc_post(ctx, x, residual, post, comb);
}

// silu(gate) * up as one node (ggml's GLU op) instead of two: the CPU kernel (ggml_vec_swiglu_f32) computes the
// same silu (ggml_v_silu) and product as ggml_vec_silu_f32 then ggml_vec_mul_f32, so the bits are the same.
// One node fewer per FFN: on the CPU each node costs a thread barrier, which matters on small models.
ggml_tensor * BlockBuilder::glu(ggml_tensor * gate, ggml_tensor * up) const { return ggml_swiglu_split(ctx, gate, up); }

ggml_tensor * BlockBuilder::swiglu(ggml_tensor * x, ggml_tensor * wg, ggml_tensor * wu, ggml_tensor * wd, float limit) const {
    ggml_tensor * gate = mm(wg, x);
    ggml_tensor * up = mm(wu, x);
    if (limit > 0.0f) {
        gate = ggml_clamp(ctx, gate, -INFINITY, limit);
        up = ggml_clamp(ctx, up, -limit, limit);
    }
    return mm(wd, glu(gate, up));
}

// Sigmoid routing (docs/model.md, MoE): s = sigmoid(logits), experts chosen by s + bias (within the best groups),
// weighted by s (normalized over the chosen, times the scale). Our CPU op breaks exact ties toward the lower
// expert id and handles expert groups; on another device without groups, ggml's sigmoid + argsort top-k +
// get_rows (llama.cpp's build_moe_ffn) do the same, with ties in an order ggml leaves open.
void BlockBuilder::route(ggml_tensor * logits, ggml_tensor * bias, ggml_tensor ** ids, ggml_tensor ** wts) const {
    const int64_t k = hp.n_expert_used, n_expert = logits->ne[0];
    if (cpu_kernels || hp.n_expert_groups > 1) {
        ggml_tensor * r = moe_route(ctx, logits, bias, &params.moe);  // [2k, T]: ids (as float), then weights
        *ids = ggml_cast(ctx, ggml_cont(ctx, ggml_view_2d(ctx, r, k, T, r->nb[1], 0)), GGML_TYPE_I32);
        *wts = ggml_cont(ctx, ggml_view_3d(ctx, r, 1, k, T, sizeof(float), r->nb[1], k * sizeof(float)));
        return;
    }
    ggml_tensor * s = ggml_sigmoid(ctx, logits);  // [n_expert, T]
    *ids = ggml_argsort_top_k(ctx, ggml_add(ctx, s, bias), (int) k);  // [k, T]
    ggml_tensor * w = ggml_get_rows(ctx, ggml_reshape_3d(ctx, s, 1, n_expert, T), *ids);  // [1, k, T]
    if (hp.expert_weights_norm) {
        w = ggml_div(ctx, w, ggml_reshape_3d(ctx, ggml_sum_rows(ctx, ggml_reshape_2d(ctx, w, k, T)), 1, 1, T));
    }
    *wts = hp.expert_weights_scale != 1.0f ? ggml_scale(ctx, w, hp.expert_weights_scale) : w;
}

// Routed experts (each read once per ubatch by mul_mat_id) + the shared expert.
ggml_tensor * BlockBuilder::moe(ggml_tensor * x, const LayerWeights & w, int il) const {
    const int64_t k = hp.n_expert_used;
    ggml_tensor *ids, *wts;  // i32 [k, T] chosen experts, f32 [1, k, T] their weights
    route(mm(w.gate_inp, x), w.exp_probs_b, &ids, &wts);
    ggml_tensor * xe = ggml_reshape_3d(ctx, x, hp.n_embd, 1, T);
    ggml_tensor * gate = mm_id(w.gate_exps, xe, ids);  // [n_ff_exp, k, T]
    ggml_tensor * up = mm_id(w.up_exps, xe, ids);
    const float limit = hp.swiglu_clamp_exp[il];
    if (limit > 0.0f) {
        gate = ggml_clamp(ctx, gate, -INFINITY, limit);
        up = ggml_clamp(ctx, up, -limit, limit);
    }
    ggml_tensor * down = mm_id(w.down_exps, glu(gate, up), ids);
    down = ggml_mul(ctx, down, wts);  // [n_embd, k, T]
    ggml_tensor * out = nullptr;
    for (int64_t i = 0; i < k; ++i) {
        ggml_tensor * e = ggml_view_2d(ctx, down, hp.n_embd, T, down->nb[2], i * down->nb[1]);
        out = out ? ggml_add(ctx, out, e) : e;
    }
    if (w.gate_shexp == nullptr) {  // n_expert_shared == 0
        return out;
    }
    return ggml_add(ctx, out, swiglu(x, w.gate_shexp, w.up_shexp, w.down_shexp, hp.swiglu_clamp_shexp[il]));
}

ggml_tensor * BlockBuilder::conv(ggml_tensor * xp, ggml_tensor * kernel, ggml_tensor * conv_cache, int64_t n_rows,
                                 ggml_tensor ** xt_out) const {
    const int64_t K = hp.ssm_conv_kernel, channels = conv_cache->ne[1];
    ggml_tensor * xt = concat({conv_cache, ggml_transpose(ctx, xp)}, 0);  // [K-1+T, channels]
    ggml_tensor * tail = ggml_view_2d(ctx, xt, K - 1, channels, xt->nb[1], n_rows * xt->nb[0]);
    ggml_build_forward_expand(gf, ggml_cpy(ctx, tail, conv_cache));
    *xt_out = xt;
    ggml_tensor * y = ggml_ssm_conv(ctx, ggml_reshape_3d(ctx, xt, K - 1 + n_rows, channels, 1), kernel);
    return ggml_reshape_2d(ctx, y, channels, n_rows);
}

// KDA (docs/model.md, KDA): gated delta rule per head, state in the cache. The projections run over the group's rows;
// the conv windows and recurrent states per part, or of all parts at once when their states are in cells of the
// engine's (RowGroup::kda_over_cells). q, k and v are convolved together (their windows sit side by side in the conv
// cache, graph/layer_cache.h): one conv instead of three, the same arithmetic per channel.
ggml_tensor * BlockBuilder::kda(ggml_tensor * x, const LayerWeights & w, uint32_t il) const {
    const int64_t d = hp.kda_head_dim, nh = hp.n_head, inner = hp.kda_inner(), K = hp.ssm_conv_kernel;
    ggml_tensor * proj = concat({mm(w.wq, x), mm(w.wk, x), mm(w.wv, x)}, 0);  // [3*inner, T]
    auto taps = [&](ggml_tensor * k) { return ggml_reshape_2d(ctx, k, K, inner); };
    ggml_tensor * kernel = concat({taps(w.conv_q), taps(w.conv_k), taps(w.conv_v)}, 1);
    const bool over_cells = group->kda_over_cells();
    // the windows and rows each conv ran over, [K-1+n, channels, P]: one for all parts over cells, else one per part
    std::vector<ggml_tensor *> xts;
    ggml_tensor * convolved;  // [3*inner, T], before the SiLU
    if (over_cells) {
        convolved = conv_over_cells(proj, kernel, il, &xts.emplace_back());
    } else {
        std::vector<ggml_tensor *> pieces;
        for (const GraphPart * part : group->parts) {
            pieces.push_back(conv(rows_view(ctx, proj, 1, part->row0, part->n_rows), kernel, part->cache.layer(il).conv,
                                  part->n_rows, &xts.emplace_back()));
        }
        convolved = concat(pieces, 1);
    }
    // q | k | v per row; the SiLU once over the group's rows, not per part (one node per KDA layer instead of one per
    // sequence in a step of several: issue 24)
    ggml_tensor * qkv = ggml_silu(ctx, convolved);
    auto part_of = [&](int i) {  // q, k or v as [d, nh, T, 1]
        return ggml_view_4d(ctx, qkv, d, nh, T, 1, d * sizeof(float), qkv->nb[1], qkv->nb[1] * T, i * inner * sizeof(float));
    };
    ggml_tensor * q = l2(part_of(0));
    ggml_tensor * k = l2(part_of(1));
    ggml_tensor * v = ggml_cont(ctx, part_of(2));

    ggml_tensor * f = ggml_add(ctx, mm(w.ssm_f_b, mm(w.ssm_f_a, x)), w.ssm_dt_b);
    f = ggml_reshape_4d(ctx, f, d, nh, T, 1);
    ggml_tensor * neg_a = ggml_reshape_4d(ctx, w.ssm_a, 1, nh, 1, 1);  // -exp(A_log)
    ggml_tensor * gate;
    if (hp.has_kda_lower_bound) {  // lower_bound * sigmoid(exp(A_log) * f)
        gate = ggml_scale(ctx, ggml_sigmoid(ctx, ggml_scale(ctx, ggml_mul(ctx, f, neg_a), -1.0f)), hp.kda_lower_bound);
    } else {                       // -exp(A_log) * softplus(f)
        gate = ggml_mul(ctx, ggml_softplus(ctx, f), neg_a);
    }
    ggml_tensor * beta = ggml_reshape_4d(ctx, ggml_sigmoid(ctx, mm(w.ssm_beta, x)), 1, nh, T, 1);

    ggml_tensor * o;  // [d, nh, T]
    if (over_cells) {
        o = delta_rule_over_cells(q, k, v, gate, beta, il, xts[0]);
    } else {
        std::vector<ggml_tensor *> outs;
        for (size_t p = 0; p < group->parts.size(); ++p) {
            GraphPart & part = *group->parts[p];
            const LayerCache & c = part.cache.layer(il);
            const int64_t r0 = part.row0, n = part.n_rows;
            ggml_tensor * packed = delta_rule_in_cache(rows_view(ctx, q, 2, r0, n), rows_view(ctx, k, 2, r0, n),
                                                       rows_view(ctx, v, 2, r0, n), rows_view(ctx, gate, 2, r0, n),
                                                       rows_view(ctx, beta, 2, r0, n), c.state, nullptr,
                                                       part.keep_snapshots ? n : 1);
            if (part.keep_snapshots) keep_snapshots({&part}, il, packed, xts[p]);
            outs.push_back(ggml_view_3d(ctx, packed, d, nh, n, d * sizeof(float), d * nh * sizeof(float), 0));
        }
        o = concat(outs, 2);
    }

    ggml_tensor * og = ggml_reshape_3d(ctx, mm(w.ssm_g_b, mm(w.ssm_g_a, x)), d, nh, T);
    o = ggml_mul(ctx, rms(o, w.ssm_norm), ggml_sigmoid(ctx, og));
    return mm(w.wo, ggml_reshape_2d(ctx, o, d * nh, T));
}

// The conv of every part at once (RowGroup::kda_over_cells), over the windows in their cells: proj [channels, T]
// holds P parts of n = T / P rows each. The parts' windows are gathered into [K-1, channels, P], each followed by its
// rows (*xt_out: [K-1+n, channels, P]), convolved as P sequences by one ggml_ssm_conv (the same sums per channel and
// row as each part alone), and the new windows written back to the cells. Returns the conv output [channels, T]
// (before the SiLU).
ggml_tensor * BlockBuilder::conv_over_cells(ggml_tensor * proj, ggml_tensor * kernel, uint32_t il,
                                            ggml_tensor ** xt_out) const {
    const LayerCache & all = *group->parts[0]->cache.layer(il).cells;
    const int64_t K = hp.ssm_conv_kernel, channels = proj->ne[0], P = (int64_t) group->parts.size(), n = T / P;
    ggml_tensor * cells = group->cells_input(hp).add_cells(ctx);
    ggml_tensor * windows = ggml_reshape_3d(ctx, ggml_get_rows(ctx, all.conv, cells), K - 1, channels, P);
    ggml_tensor * rows = ggml_permute(ctx, ggml_reshape_3d(ctx, proj, channels, n, P), 1, 0, 2, 3);  // [n, channels, P]
    ggml_tensor * xt = concat({windows, rows}, 0);
    ggml_tensor * tail =
        ggml_cont(ctx, ggml_view_3d(ctx, xt, K - 1, channels, P, xt->nb[1], xt->nb[2], n * xt->nb[0]));
    tail = ggml_reshape_2d(ctx, tail, (K - 1) * channels, P);
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, all.conv, tail, cells));
    *xt_out = xt;
    return ggml_reshape_2d(ctx, ggml_ssm_conv(ctx, xt, kernel), channels, T);
}

// The gated delta rule of every part at once (RowGroup::kda_over_cells), over the states in their cells: q, k, v and
// gate [d, nh, T], beta [1, nh, T], P parts of n = T / P rows each, run as P sequences by one ggml_gated_delta_net
// (each (sequence, head) the same arithmetic as the part alone); the final states are written back to the cells, and
// the parts that keep snapshots get them from `xt` (conv_over_cells) and the op's per-row states. Returns the
// outputs [d, nh, T].
ggml_tensor * BlockBuilder::delta_rule_over_cells(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * gate,
                                                  ggml_tensor * beta, uint32_t il, ggml_tensor * xt) const {
    const LayerCache & all = *group->parts[0]->cache.layer(il).cells;
    const int64_t d = hp.kda_head_dim, nh = hp.n_head, P = (int64_t) group->parts.size(), n = T / P;
    const bool snapshots = group->parts[0]->keep_snapshots;
    ggml_tensor * cells = group->cells_input(hp).add_cells(ctx);
    auto per_part = [&](ggml_tensor * t) { return ggml_reshape_4d(ctx, t, t->ne[0], nh, n, P); };
    ggml_tensor * packed = delta_rule_in_cache(per_part(q), per_part(k), per_part(v), per_part(gate), per_part(beta),
                                               all.state, cells, snapshots ? n : 1);
    if (snapshots) keep_snapshots(group->parts, il, packed, xt);
    return ggml_view_3d(ctx, packed, d, nh, T, d * sizeof(float), d * nh * sizeof(float), 0);
}

// What a verify pass leaves for its rollback (graph/layer_cache.h, KdaSnapshots), for `parts` (n rows each) run by
// one gated delta rule whose output is `packed` and one conv over xt [K-1+n, channels, P]: the conv window after each
// row r, pre-conv rows [r+1, r+K) of each part, made contiguous, side by side in windows [K-1, channels, P, n] (a
// rollback copies one of them, on the device; one overlapping view would be smaller, but ggml sizes a view as if it
// were contiguous).
void BlockBuilder::keep_snapshots(const std::vector<GraphPart *> & parts, uint32_t il, ggml_tensor * packed,
                                  ggml_tensor * xt) const {
    const int64_t K = hp.ssm_conv_kernel, channels = xt->ne[1], P = (int64_t) parts.size(), n = parts[0]->n_rows;
    std::vector<ggml_tensor *> per_row;
    for (int64_t r = 0; r < n; ++r) {
        ggml_tensor * w_r =
            ggml_cont(ctx, ggml_view_3d(ctx, xt, K - 1, channels, P, xt->nb[1], xt->nb[2], (r + 1) * xt->nb[0]));
        per_row.push_back(ggml_reshape_4d(ctx, w_r, K - 1, channels, P, 1));
    }
    ggml_tensor * windows = concat(per_row, 3);
    ggml_set_output(packed);
    ggml_set_output(windows);
    ggml_build_forward_expand(gf, windows);  // no later node reads it: expanded here
    for (int64_t p = 0; p < P; ++p) {
        parts[p]->snapshots.push_back(KdaSnapshots{&parts[p]->cache.layer(il), packed, windows, p, P});
    }
}

// The kpool indexer's cache rows (docs/model.md, Indexer) of one part, from the group's key rows ik [idim, T] and gate
// rows ig: the part's key/gate rows and the pooled key of every pool its rows touch. Returns the pooled keys its rows
// score, f32 [idim, n_pool] (a view of the cache).
ggml_tensor * BlockBuilder::index_rows(GraphPart & part, const LayerCache & c, const LayerWeights & w, ggml_tensor * ik,
                                       ggml_tensor * ig) const {
    InputCacheRows & cache_rows = part.cache_rows_input(ctx);
    write_rows_at(rows_view(ctx, ik, 1, part.row0, part.n_rows), c.idx_k, cache_rows.pos);
    write_rows_at(rows_view(ctx, ig, 1, part.row0, part.n_rows), c.idx_g, cache_rows.pos);
    // the pooled key of every pool the part's rows touch (InputCacheRows), complete or not: an incomplete pool is
    // no candidate until the ubatch writing its last row computes it again, from all its rows
    cache_rows.add_pools(ctx, hp.idx_kpool, c.pooled->ne[1], c.idx_k->ne[1]);
    write_rows_at(pooled_keys(c, w, cache_rows.pool_rows), c.pooled, cache_rows.pool_dst);
    return scored_pools(part, c);
}

// The pooled keys a part's rows score: the first n_pool of its cache, f32 [idim, n_pool] (a view).
ggml_tensor * BlockBuilder::scored_pools(const GraphPart & part, const LayerCache & c) const {
    return ggml_view_2d(ctx, c.pooled, hp.idx_head_dim, part.layout.n_pool, c.pooled->nb[1], 0);
}

// index_rows of every part at once, in their cells (RowGroup::over_cells; `all`: the layer's caches of every cell):
// one write of the key rows, one of the gate rows, one pooling of every part's pools (InputCells). Each part then
// scores its scored_pools.
void BlockBuilder::index_rows_over_cells(const LayerCache & all, const LayerWeights & w, ggml_tensor * ik,
                                         ggml_tensor * ig) const {
    InputCells & in = group->cells_input(hp);
    ggml_tensor * rows = in.add_rows(ctx);
    in.add_pools(ctx, hp.idx_kpool);
    write_rows_at(ik, all.idx_k, rows);
    write_rows_at(ig, all.idx_g, rows);
    write_rows_at(pooled_keys(all, w, in.pool_rows), all.pooled, in.pool_dst);
}

// The pooled keys (docs/model.md, Indexer) of the pools whose member rows `pool_rows` lists (i32 [kpool * n_slots],
// rows of c's key and gate caches): softmax over each pool's gate scores (+ idx_ape) weighting its keys, f32
// [idim, n_slots].
ggml_tensor * BlockBuilder::pooled_keys(const LayerCache & c, const LayerWeights & w, ggml_tensor * pool_rows) const {
    const int64_t idim = hp.idx_head_dim, kpool = hp.idx_kpool, n_slots = pool_rows->ne[0] / kpool;
    auto members = [&](ggml_tensor * rows) {  // the pools' rows as [idim, kpool, n_slots]
        return ggml_reshape_3d(ctx, ggml_get_rows(ctx, rows, pool_rows), idim, kpool, n_slots);
    };
    ggml_tensor * logits = ggml_add(ctx, members(c.idx_g), w.idx_ape);
    ggml_tensor * probs = ggml_soft_max(ctx, ggml_cont(ctx, ggml_permute(ctx, logits, 1, 0, 2, 3)));
    ggml_tensor * keys = ggml_cont(ctx, ggml_permute(ctx, members(c.idx_k), 1, 0, 2, 3));
    return ggml_reshape_2d(ctx, ggml_sum_rows(ctx, ggml_mul(ctx, probs, keys)), idim, n_slots);
}

// A non-f32 cache's rows as f32 for a product with f32 queries. ggml would otherwise round the queries (and a
// dense pass's probabilities) to the cache's type, as llama.cpp's f16 cache does: ~5e-4 relative, enough to make a
// prompt ubatch's dense pass disagree with the rows' own gathered attention (graph/sparse_attention_ops.h widens
// the rows it reads and keeps the queries f32) and flip greedy tokens of a q8_0 file between a cache hit and a
// fresh sequence (tests/csrc/test_prompt_cache.py). The copy is n_kv x kv_lora_rank floats for a dense pass (at most
// max_dense_keys rows: 16 MiB per DSA layer on GLM-5.3-Flash, in the compute buffer).
ggml_tensor * BlockBuilder::widened(ggml_tensor * rows) const {
    return rows->type == GGML_TYPE_F32 ? rows : ggml_cast(ctx, rows, GGML_TYPE_F32);
}

// The kpool indexer's choice (docs/model.md, Indexer) for one part: its queries iq [idim, ih, T] and head weights
// wts [ih, T] (the group's) score its complete pools; returns its chosen pools i32 [n_top_pool, n_rows].
Selection BlockBuilder::select(GraphPart & part, ggml_tensor * pooled, ggml_tensor * iq, ggml_tensor * wts) const {
    const int64_t idim = hp.idx_head_dim, ih = hp.idx_n_head, n = part.n_rows, n_pool = pooled->ne[1];
    iq = rows_view(ctx, iq, 2, part.row0, n);
    wts = rows_view(ctx, wts, 1, part.row0, n);
    if (cpu_kernels) {
        // iq made contiguous: ggml multiplies a prompt ubatch's permuted operand element by element, a contiguous one
        // with tinyBLAS
        ggml_tensor * kq = mm(pooled, ggml_cont(ctx, ggml_permute(ctx, iq, 0, 2, 1, 3)));  // [n_pool, n, ih]
        params.indexer_scale = 1.0f / std::sqrt((float) idim);
        ggml_tensor * scores = indexer_scores(ctx, kq, wts, &params.indexer_scale);
        return Selection{kpool_top_k(ctx, scores, &part.kpool), &part.kpool};
    }
    ggml_tensor * kq = mm(pooled, ggml_permute(ctx, iq, 0, 2, 1, 3));  // [n_pool, n, ih]
    kq = ggml_relu(ctx, ggml_scale(ctx, kq, 1.0f / std::sqrt((float) idim)));
    kq = ggml_cont(ctx, ggml_permute(ctx, kq, 1, 2, 0, 3));                        // [ih, n_pool, n]
    ggml_tensor * scores = ggml_reshape_2d(ctx, ggml_mul_mat(ctx, kq, ggml_reshape_3d(ctx, wts, ih, 1, n)), n_pool, n);
    if (!part.kpool_rows) part.kpool_rows.emplace(ctx, n);
    return Selection{kpool_top_k_std(ctx, scores, part.kpool_rows->n_cand, part.kpool.n_top_pool), &part.kpool, true};
}

bool BlockBuilder::attends_at_once(const LayerWeights & w) const {
    return groups_at_once && !cpu_kernels && group != nullptr && !multiplies_rows_alone(w.wkv_a) &&
           group->selects_at_once();
}

Selection BlockBuilder::select_at_once(const LayerCache & all, uint32_t il, ggml_tensor * iq, ggml_tensor * wts) const {
    const GraphPart & first = *group->parts[0];
    const int64_t idim = hp.idx_head_dim, ih = hp.idx_n_head, P = (int64_t) group->parts.size(), n = first.n_rows;
    const int64_t n_pool = first.layout.n_pool;
    // every part's scored pools, [idim, n_pool, 1, P]: the first n_pool of each (consecutive) cell's pooled keys
    const size_t row_bytes = all.pooled->nb[1], cell_bytes = first.cache.layer(il).pooled->ne[1] * row_bytes;
    ggml_tensor * pooled = ggml_view_4d(ctx, all.pooled, idim, n_pool, 1, P, row_bytes, n_pool * row_bytes, cell_bytes,
                                        first.cache.cell * cell_bytes);
    ggml_tensor * q = ggml_permute(ctx, ggml_reshape_4d(ctx, iq, idim, ih, n, P), 0, 2, 1, 3);  // [idim, n, ih, P]
    ggml_tensor * kq = ggml_mul_mat(ctx, pooled, q);                                             // [n_pool, n, ih, P]
    kq = ggml_relu(ctx, ggml_scale(ctx, kq, 1.0f / std::sqrt((float) idim)));
    kq = ggml_cont(ctx, ggml_permute(ctx, kq, 1, 2, 0, 3));                                      // [ih, n_pool, n, P]
    ggml_tensor * scores = ggml_mul_mat(ctx, kq, ggml_reshape_4d(ctx, wts, ih, 1, n, P));        // [n_pool, 1, n, P]
    if (!group->kpool_rows) group->kpool_rows.emplace(ctx, T);
    Selection sel{kpool_top_k_std(ctx, ggml_reshape_2d(ctx, scores, n_pool, T), group->kpool_rows->n_cand,
                                  first.kpool.n_top_pool),
                  &first.kpool, true};
    sel.whole_group = true;
    return sel;
}

ggml_tensor * BlockBuilder::attend_at_once(ggml_tensor * q_abs, const LayerWeights & w, const LayerCache & all,
                                           uint32_t il, Selection & sel) const {
    const GraphPart & first = *group->parts[0];
    const int64_t kvr = hp.kv_lora_rank, P = (int64_t) group->parts.size(), n = first.n_rows;
    const int64_t n_ctx = first.cache.layer(il).latent->ne[1];
    if (sel.rows == nullptr) {
        group->kpool_rows->add_tail(ctx, hp);
        kpool_rows_std(ctx, sel.pools, *group->kpool_rows, hp.idx_kpool, n_ctx, &sel.rows, &sel.rows_mask);
    }
    const int64_t n_sel = sel.rows->ne[0];
    // the parts in chunks whose gathered keys take at most kGatherChunkBytes (at least one part each)
    const int64_t per_chunk = std::max<int64_t>(1, kGatherChunkBytes / (n * n_sel * kvr * (int64_t) sizeof(float)));
    const size_t cell_bytes = n_ctx * all.latent->nb[1];
    std::vector<ggml_tensor *> pieces;
    for (int64_t p0 = 0; p0 < P; p0 += per_chunk) {
        const int64_t m = std::min(per_chunk, P - p0), r0 = p0 * n;
        // the chunk's cells' latent rows [kvr, n_ctx, m], and each row's selected ones of its own cell
        ggml_tensor * latent = ggml_view_3d(ctx, all.latent, kvr, n_ctx, m, all.latent->nb[1], cell_bytes,
                                            (first.cache.cell + p0) * cell_bytes);
        ggml_tensor * rows = ggml_view_2d(ctx, sel.rows, n_sel * n, m, n * sel.rows->nb[1], r0 * sel.rows->nb[1]);
        ggml_tensor * k = ggml_reshape_4d(ctx, ggml_get_rows(ctx, latent, rows), kvr, n_sel, 1, m * n);
        ggml_tensor * mask = ggml_view_4d(ctx, sel.rows_mask, n_sel, 1, 1, m * n, sel.rows_mask->nb[1],
                                          sel.rows_mask->nb[2], sel.rows_mask->nb[3], r0 * sel.rows_mask->nb[3]);
        ggml_tensor * q = ggml_view_3d(ctx, q_abs, kvr, m * n, q_abs->ne[2], q_abs->nb[1], q_abs->nb[2],
                                       r0 * q_abs->nb[1]);
        ggml_tensor * kq = ggml_mul_mat(ctx, k, ggml_permute(ctx, q, 0, 3, 2, 1));          // [n_sel, 1, nh, m*n]
        kq = ggml_soft_max_ext(ctx, kq, mask, 1.0f / std::sqrt((float) hp.head_k_mla), 0.0f);
        ggml_tensor * kqv = ggml_mul_mat(ctx, ggml_cont(ctx, ggml_transpose(ctx, k)), kq);  // [kvr, 1, nh, m*n]
        pieces.push_back(ggml_mul_mat(ctx, w.wv_b, kqv));                                   // [v, 1, nh, m*n]
    }
    return concat(pieces, 3);
}

ggml_tensor * BlockBuilder::attend_gathered(ggml_tensor * q_abs, const LayerWeights & w, ggml_tensor * latent,
                                           const Selection & sel, int64_t r0, int64_t n) const {
    const int64_t kvr = hp.kv_lora_rank, n_sel = sel.rows->ne[0];
    ggml_tensor * rows = sel.rows, * mask = sel.rows_mask, * q = q_abs;  // the whole part when one chunk
    if (n < q_abs->ne[1]) {
        rows = ggml_view_2d(ctx, rows, n_sel, n, rows->nb[1], r0 * rows->nb[1]);
        mask = ggml_view_4d(ctx, mask, n_sel, 1, 1, n, mask->nb[1], mask->nb[2], mask->nb[3], r0 * mask->nb[3]);
        q = ggml_view_3d(ctx, q, kvr, n, q->ne[2], q->nb[1], q->nb[2], r0 * q->nb[1]);
    }
    ggml_tensor * k = ggml_get_rows(ctx, latent, ggml_reshape_1d(ctx, rows, n_sel * n));
    k = ggml_reshape_4d(ctx, k, kvr, n_sel, 1, n);
    ggml_tensor * kq = ggml_mul_mat(ctx, k, ggml_permute(ctx, q, 0, 3, 2, 1));          // [n_sel, 1, nh, n]
    kq = ggml_soft_max_ext(ctx, kq, mask, 1.0f / std::sqrt((float) hp.head_k_mla), 0.0f);
    ggml_tensor * kqv = ggml_mul_mat(ctx, ggml_cont(ctx, ggml_transpose(ctx, k)), kq);  // [kvr, 1, nh, n]
    return ggml_mul_mat(ctx, w.wv_b, kqv);                                              // [v, 1, nh, n]
}

ggml_tensor * BlockBuilder::attend(ggml_tensor * q_abs, const LayerWeights & w, const LayerCache & c, GraphPart & part,
                                   Selection & sel, bool * kqv_out) const {
    const int64_t nope = hp.head_k_mla, kvr = hp.kv_lora_rank, n = part.n_rows;
    *kqv_out = false;
    if (part.layout.n_kv == 0) {  // gathered from the whole cache: the rows are inputs of the step (no n_past in the graph)
        ggml_tensor * latent = c.latent;
        if (sel.rows == nullptr && sel.std_ops) {
            part.kpool_rows->add_tail(ctx, hp);
            kpool_rows_std(ctx, sel.pools, *part.kpool_rows, hp.idx_kpool, latent->ne[1], &sel.rows, &sel.rows_mask);
        } else if (sel.rows == nullptr) {
            sel.rows = kpool_rows(ctx, sel.pools, sel.at);
            sel.rows_mask = kpool_rows_mask(ctx, sel.pools, sel.at);
        }
        if (cpu_kernels && !sel.std_ops) {  // the selected rows read in place (graph/sparse_attention_ops.h)
            params.attention_scale = 1.0f / std::sqrt((float) nope);
            *kqv_out = true;
            return sparse_attention(ctx, q_abs, latent, sel.rows, sel.rows_mask, &params.attention_scale);
        }
        const int64_t by_bytes = kGatherChunkBytes / (kvr * sel.rows->ne[0] * (int64_t) sizeof(float));
        const int64_t chunk = std::max<int64_t>({1, std::min(by_bytes, kGatherChunkRows),
                                                 (n + kGatherMaxChunks - 1) / kGatherMaxChunks});
        std::vector<ggml_tensor *> pieces;
        for (int64_t r0 = 0; r0 < n; r0 += chunk) {
            pieces.push_back(attend_gathered(q_abs, w, latent, sel, r0, std::min(chunk, n - r0)));
        }
        return concat(pieces, 3);  // [v, 1, nh, n]
    }
    // the rows' keys, n_past + n_rows, padded to a multiple of kDenseKeysPad by the cache rows after them, which the
    // mask hides
    const int64_t n_kv = part.layout.n_kv;
    const int64_t n_keys = std::min<int64_t>(GGML_PAD(n_kv, kDenseKeysPad), c.latent->ne[1]);
    if (sel.mask == nullptr && sel.std_ops) {  // made where the layer runs (issue 26: a CPU op cost 6 more splits)
        if (sel.at->select_tail && part.tail_keys == nullptr) {
            part.tail_keys = kpool_tail_keys_std(ctx, part.kpool_rows->n_cand, hp.idx_kpool, n_kv, n_keys);
        }
        sel.mask = kpool_mask_std(ctx, sel.pools, part.kpool_rows->n_cand, part.tail_keys, hp.idx_kpool,
                                  part.layout.n_pool, n_keys);
    } else if (sel.mask == nullptr) {
        sel.mask = kpool_mask(ctx, sel.pools, n_keys, sel.at);
    }
    ggml_tensor * latent = widened(ggml_view_2d(ctx, c.latent, kvr, n_keys, c.latent->nb[1], 0));
    ggml_tensor * kq = ggml_mul_mat(ctx, latent, q_abs);                                 // [n_keys, n, nh]
    kq = ggml_soft_max_ext(ctx, kq, sel.mask, 1.0f / std::sqrt((float) nope), 0.0f);
    ggml_tensor * kqv = ggml_mul_mat(ctx, ggml_cont(ctx, ggml_transpose(ctx, latent)), kq);  // [kvr, n, nh]
    return ggml_permute(ctx, ggml_mul_mat(ctx, w.wv_b, kqv), 0, 2, 1, 3);                   // [v, nh, n]
}

// Sparse MLA over the latent (docs/model.md, DSA), W_kb absorbed into the query and W_vb applied after. The projections
// run over the group's rows; cache writes, the indexer and attention per part. W_vb multiplies the latent-space
// outputs of all parts at once where they come from the CPU kernel (one 1-column product per row and head: the
// same bits as a part alone).
ggml_tensor * BlockBuilder::dsa(ggml_tensor * x, const LayerWeights & w, uint32_t il, bool run_indexer,
                                std::vector<Selection> & sels, bool attend_rows) const {
    const int64_t nope = hp.head_k_mla, nh = hp.n_head;
    const std::vector<GraphPart *> & parts = group->parts;
    ggml_tensor * qr = rms(mm(w.wq_a, x), w.q_a_norm);
    ggml_tensor * q = ggml_reshape_3d(ctx, mm(w.wq_b, qr), nope, nh, T);
    ggml_tensor * kv = rms(mm(w.wkv_a, x), w.kv_a_norm);
    // the cache rows of all parts at once where they are cells of the engine's (issue 24), else per part
    const LayerCache * all = group->over_cells() ? parts[0]->cache.layer(il).cells : nullptr;
    if (all != nullptr) {
        write_rows_at(kv, all->latent, group->cells_input(hp).add_rows(ctx));
    } else {
        for (GraphPart * part : parts) {
            write_rows_at(rows_view(ctx, kv, 1, part->row0, part->n_rows), part->cache.layer(il).latent,
                          part->cache_rows_input(ctx).pos);
        }
    }
    const bool any_indexer = run_indexer && std::any_of(sels.begin(), sels.end(), [](const Selection & s) { return s.pools == nullptr; });
    const auto made = [](const Selection & s) { return s.pools == nullptr; };
    const auto given = [](const Selection & s) { return s.whole_group; };
    const bool one_set = all != nullptr && attends_at_once(w) &&  // every part's at once (issue 48)
                         (std::all_of(sels.begin(), sels.end(), made) || std::all_of(sels.begin(), sels.end(), given));
    if (any_indexer) {
        const int64_t idim = hp.idx_head_dim, ih = hp.idx_n_head;
        ggml_tensor * ik = ggml_norm(ctx, mm(w.idx_k, x), hp.ln_eps);
        ik = ggml_add(ctx, ggml_mul(ctx, ik, w.idx_k_norm), w.idx_k_norm_b);
        ggml_tensor * ig = mm(w.idx_gate, x);
        std::vector<ggml_tensor *> pooled(parts.size(), nullptr);
        const bool all_index = std::all_of(sels.begin(), sels.end(), [](const Selection & s) { return s.pools == nullptr; });
        if (all != nullptr && all_index) {
            index_rows_over_cells(*all, w, ik, ig);
            for (size_t p = 0; p < parts.size() && !one_set; ++p) {
                pooled[p] = scored_pools(*parts[p], parts[p]->cache.layer(il));
            }
        } else {
            for (size_t p = 0; p < parts.size(); ++p) {
                if (sels[p].pools == nullptr) pooled[p] = index_rows(*parts[p], parts[p]->cache.layer(il), w, ik, ig);
            }
        }
        if (!attend_rows) return nullptr;  // the cache rows are written: nothing reads the rest
        ggml_tensor * iq = ggml_reshape_3d(ctx, mm(w.idx_q_b, qr), idim, ih, T);
        ggml_tensor * wts = ggml_scale(ctx, mm(w.idx_proj, x), 1.0f / std::sqrt((float) ih));
        if (one_set) sels.assign(parts.size(), select_at_once(*all, il, iq, wts));
        for (size_t p = 0; p < parts.size(); ++p) {
            if (pooled[p] != nullptr) sels[p] = select(*parts[p], pooled[p], iq, wts);
        }
    }
    if (!attend_rows) return nullptr;
    for (const Selection & s : sels) {
        if (s.pools == nullptr) throw std::logic_error("a DSA layer without an indexer needs a selection to reuse");
    }

    ggml_tensor * q_abs = mm(w.wk_b, ggml_permute(ctx, q, 0, 2, 1, 3));  // [kvr, T, nh]
    std::vector<ggml_tensor *> kqvs, os;  // per part, by the path its attention took
    if (one_set) {
        os.push_back(attend_at_once(q_abs, w, *all, il, sels[0]));
        for (Selection & s : sels) s = sels[0];  // the rows made once, for a shared layer after this one
    }
    for (size_t p = 0; p < parts.size() && !one_set; ++p) {
        GraphPart & part = *parts[p];
        bool kqv_out = false;
        ggml_tensor * out = attend(rows_view(ctx, q_abs, 1, part.row0, part.n_rows), w, part.cache.layer(il), part,
                                   sels[p], &kqv_out);
        (kqv_out ? kqvs : os).push_back(out);
    }
    if (!kqvs.empty() && !os.empty()) throw std::logic_error("a DSA layer's parts attend on different devices");
    ggml_tensor * o;
    if (!kqvs.empty()) {
        o = ggml_mul_mat(ctx, w.wv_b, concat(kqvs, 3));  // [v, 1, nh, T]
    } else if (os.size() == 1) {
        o = os[0];  // [v, 1, nh, T] gathered or [v, nh, T] dense
    } else {  // a one-pass group's parts (graph/trunk.h), gathered or dense: joined as rows [v * nh, n]
        for (ggml_tensor *& t : os) {
            t = ggml_reshape_2d(ctx, ggml_is_contiguous(t) ? t : ggml_cont(ctx, t), hp.head_v_mla * nh,
                                ggml_nelements(t) / (hp.head_v_mla * nh));
        }
        o = concat(os, 1);
    }
    o = ggml_reshape_2d(ctx, ggml_is_contiguous(o) ? o : ggml_cont(ctx, o), hp.head_v_mla * nh, T);
    if (group->row_scale && group->row_scale->t) {
        o = ggml_mul(ctx, o, group->row_scale->t);
    }
    return mm(w.wo, o);
}

}  // namespace glm5next
