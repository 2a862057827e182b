#include "graph/draft_head.h"

namespace glm5next {

void build_draft_graph(DraftGraph & g, ggml_context * ctx, const Model & model, const LayerWeights & w,
                       const CacheView & cache, int64_t n_rows, bool shared) {
    const HParams & hp = model.hp;
    const uint32_t il = hp.n_trunk();
    g.gf = ggml_new_graph_custom(ctx, graph_size(model.hp), false);
    g.layout = graph_layout(hp, cache.n_ctx, cache.n_past, n_rows);
    g.params.kpool = {cache.n_past, hp.idx_kpool, hp.idx_top_k / hp.idx_kpool, hp.idx_select_tail};
    g.params.kpool_saved = g.params.kpool;  // its n_past: the row that made the reused selection (set_inputs)
    g.params.moe = {hp.n_expert_used, hp.n_expert_groups, hp.n_group_used, hp.expert_weights_norm, hp.expert_weights_scale};

    g.inp_hidden.emplace(ctx, GGML_TYPE_F32, hp.n_embd, n_rows, "inp_hidden");
    g.inp_tokens.emplace(ctx, GGML_TYPE_I32, n_rows, 1, "inp_tokens");
    g.inp_cache_rows.emplace(ctx, n_rows);
    g.inp_row_scale.emplace(ctx, hp, n_rows);
    BlockBuilder b(ctx, g.gf, hp, g.params, n_rows, g.layout, *g.inp_cache_rows, g.inp_row_scale->t, g.inp_kpool_rows);
    b.use_cpu_kernels(on_cpu(w.eh_proj));

    // u = eh_proj [RMSNorm_e(E[x_{p+1}]); RMSNorm_h(h_p)], embedding half first
    ggml_tensor * embd = ggml_get_rows(ctx, w.nextn_embd ? w.nextn_embd : model.tok_embd, g.inp_tokens->t);
    ggml_tensor * eh = ggml_concat(ctx, b.rms(embd, w.enorm), b.rms(g.inp_hidden->t, w.hnorm), 0);
    ggml_tensor * u = b.mm(w.eh_proj, eh);

    Selection sel;
    if (shared) {
        g.inp_saved_pools.emplace(ctx, GGML_TYPE_I32, g.params.kpool.n_top_pool, 1, "inp_saved_pools");
        sel = Selection{g.inp_saved_pools->t, &g.params.kpool_saved};
    }
    ggml_tensor * a = ggml_add(ctx, u, b.dsa(b.rms(u, w.attn_norm), w, cache.layer(il), !shared, sel));
    // Only the last row's output is read (z, logits): the FFN runs on that row alone, the rows before it were
    // needed for the cache rows they wrote. Rows written without drafting (64 at a time) cost a third less on the
    // bundled model (q8_0, -t 1), a draft step's output is unchanged (2..16 rows multiply as one row, BlockBuilder::mm).
    const BlockBuilder last = b.last_rows(1);
    a = ggml_view_2d(ctx, a, hp.n_embd, 1, a->nb[1], (n_rows - 1) * a->nb[1]);
    ggml_tensor * o = ggml_add(ctx, a, last.moe(last.rms(a, w.ffn_norm), w, (int) il));
    g.z = last.rms(o, w.shared_head_norm);
    ggml_tensor * head = w.nextn_head ? w.nextn_head : model.output;
    b.use_cpu_kernels(on_cpu(head));
    g.logits = b.mm(head, g.z);
    ggml_set_name(g.z, "draft_z");
    ggml_set_name(g.logits, "draft_logits");
    ggml_set_output(g.z);
    ggml_set_output(g.logits);
    ggml_build_forward_expand(g.gf, g.logits);
    if (!shared) {
        g.pools = sel.pools;
        ggml_set_name(g.pools, "draft_pools");
        ggml_set_output(g.pools);
        ggml_build_forward_expand(g.gf, g.pools);
    }
}

void DraftGraph::set_inputs(const float * hidden, const int32_t * tokens, int64_t pos0, const int32_t * saved_pools,
                            int64_t saved_p0) {
    params.kpool.n_past = pos0;  // what the custom ops read (they point to params)
    params.kpool_saved.n_past = saved_p0;
    inp_hidden->set_input(hidden);
    inp_tokens->set_input(tokens);
    inp_cache_rows->set_input(pos0);
    if (inp_saved_pools) inp_saved_pools->set_input(saved_pools);
    inp_row_scale->set_input(inp_saved_pools ? params.kpool_saved : params.kpool);
    if (inp_kpool_rows) inp_kpool_rows->set_input(params.kpool);
}

}  // namespace glm5next
