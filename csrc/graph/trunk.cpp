#include "graph/trunk.h"

namespace glm5next {

void build_trunk_graph(TrunkGraph & g, ggml_context * ctx, const Model & model, const CacheView & cache,
                       int64_t n_tokens, bool all_logits, bool snapshots) {
    const HParams & hp = model.hp;
    g.gf = ggml_new_graph_custom(ctx, graph_size(model.hp), false);
    g.layout = graph_layout(hp, cache.n_ctx, cache.n_past, n_tokens);
    g.params.kpool = {cache.n_past, hp.idx_kpool, hp.idx_top_k / hp.idx_kpool, hp.idx_select_tail};
    g.params.moe = {hp.n_expert_used, hp.n_expert_groups, hp.n_group_used, hp.expert_weights_norm, hp.expert_weights_scale};
    g.dsa_layers.clear();
    g.selections.clear();

    g.inp_tokens.emplace(ctx, GGML_TYPE_I32, n_tokens, 1, "inp_tokens");
    g.inp_cache_rows.emplace(ctx, n_tokens);
    g.inp_row_scale.emplace(ctx, hp, n_tokens);
    BlockBuilder b(ctx, g.gf, hp, g.params, n_tokens, g.layout, *g.inp_cache_rows, g.inp_row_scale->t, g.inp_kpool_rows);
    g.snapshots.clear();
    if (snapshots) {
        b.keep_snapshots(&g.snapshots);
    }

    const int64_t hc = hp.hc_mult, n_embd = hp.n_embd;
    ggml_tensor * x = ggml_get_rows(ctx, model.tok_embd, g.inp_tokens->t);  // [n_embd, T]
    x = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, x, n_embd, 1, n_tokens), n_embd, hc, n_tokens, 1);

    Selection sel;  // a "shared" layer reuses the selection of the full layer before it
    for (uint32_t il = 0; il < hp.n_trunk(); ++il) {
        const LayerWeights & w = model.layers[il];
        const LayerCache & c = cache.layer(il);
        ggml_tensor *post, *comb;
        b.use_cpu_kernels(on_cpu(w.hc_attn_fn));

        ggml_tensor * cur = b.rms(b.hc_pre(x, w.hc_attn_fn, w.hc_attn_scale, w.hc_attn_base, &post, &comb), w.attn_norm);
        if (hp.is_kda(il)) {
            cur = b.kda(cur, w, c);
        } else {
            cur = b.dsa(cur, w, c, hp.idx_full[il], sel);
            g.dsa_layers.push_back((int) il);
            g.selections.push_back(sel.pools);
            if (hp.idx_full[il]) ggml_format_name(sel.pools, "pools-%u", il);
        }
        ggml_format_name(cur, "attn_out-%u", il);
        x = b.hc_post(cur, x, post, comb);

        cur = b.rms(b.hc_pre(x, w.hc_ffn_fn, w.hc_ffn_scale, w.hc_ffn_base, &post, &comb), w.ffn_norm);
        cur = hp.is_dense_ffn(il) ? b.swiglu(cur, w.ffn_gate, w.ffn_up, w.ffn_down, hp.swiglu_clamp_exp[il])
                                  : b.moe(cur, w, il);
        ggml_format_name(cur, "ffn_out-%u", il);
        x = b.hc_post(cur, x, post, comb);
        ggml_format_name(x, "l_out-%u", il);
    }

    // mean over the streams, final norm: the post-norm hidden state (also the draft head's input)
    ggml_tensor * mean = ggml_mean(ctx, ggml_cont(ctx, ggml_permute(ctx, x, 1, 0, 2, 3)));  // [1, n_embd, T]
    g.hidden = b.rms(ggml_reshape_2d(ctx, mean, n_embd, n_tokens), model.output_norm);
    ggml_set_name(g.hidden, "hidden");
    ggml_set_output(g.hidden);
    ggml_tensor * rows = all_logits ? g.hidden : ggml_view_2d(ctx, g.hidden, n_embd, 1, g.hidden->nb[1], (n_tokens - 1) * g.hidden->nb[1]);
    b.use_cpu_kernels(on_cpu(model.output));
    g.logits = b.mm(model.output, rows);
    ggml_set_name(g.logits, "logits");
    ggml_set_output(g.logits);
    for (ggml_tensor * s : g.selections) {
        ggml_set_output(s);
        ggml_build_forward_expand(g.gf, s);
    }
    ggml_build_forward_expand(g.gf, g.logits);
}

void TrunkGraph::set_inputs(const int32_t * tokens, int64_t n_past) {
    params.kpool.n_past = n_past;  // what the custom ops read (they point to params)
    inp_tokens->set_input(tokens);
    inp_cache_rows->set_input(n_past);
    inp_row_scale->set_input(params.kpool);
    if (inp_kpool_rows) inp_kpool_rows->set_input(params.kpool);
}

}  // namespace glm5next
