#include "graph/trunk.h"

#include "model/kernel_limits.h"

namespace glm5next {

bool trunk_in_one_pass(const Model & model) {
    for (uint32_t il = 0; il < model.hp.n_trunk(); ++il) {
        if (!multiplies_rows_alone(model.layers[il].hc_attn_fn)) return true;
    }
    return false;
}

void build_trunk_graph(TrunkGraph & g, ggml_context * ctx, const Model & model, const std::vector<TrunkRows> & rows) {
    const HParams & hp = model.hp;
    g.gf = ggml_new_graph_custom(ctx, graph_size(hp, rows.size()), false);
    g.params.moe = {hp.n_expert_used, hp.n_expert_groups, hp.n_group_used, hp.expert_weights_norm, hp.expert_weights_scale};
    g.dsa_layers.clear();
    g.hidden.clear();
    g.logits.clear();
    const bool one_pass = trunk_in_one_pass(model);
    for (const TrunkRows & r : rows) {
        GraphPart & p = g.parts.add(r.cache, r.n_rows, r.all_logits ? r.n_rows : 1, kGatherMaxRows, one_pass);
        p.layout = graph_layout(hp, r.cache.n_ctx, r.cache.n_past, r.n_rows);
        p.kpool = {r.cache.n_past, hp.idx_kpool, hp.idx_top_k / hp.idx_kpool, hp.idx_select_tail};
        // a one-row verify pass is always kept whole (SeqCache::commit(1) of one row rolls nothing back): no
        // snapshots, whose window copies were one node per KDA layer and sequence in every decode step (issue 24)
        p.keep_snapshots = r.snapshots && r.n_rows > 1;
    }
    for (uint32_t il = 0; il < hp.n_trunk(); ++il) {
        if (!hp.is_kda(il)) g.dsa_layers.push_back((int) il);
    }
    g.inp_tokens.emplace(ctx, GGML_TYPE_I32, g.parts.n_rows(), 1, "inp_tokens");

    const int64_t hc = hp.hc_mult, n_embd = hp.n_embd;
    for (RowGroup & group : g.parts.groups) {
        const int64_t T = group.n_rows;
        group.row_scale.emplace(ctx, hp, T);
        BlockBuilder b(ctx, g.gf, hp, g.params, group);
        b.select_groups_at_once(true);
        ggml_tensor * x = ggml_get_rows(ctx, model.tok_embd, rows_view(ctx, g.inp_tokens->t, 0, group.row0, T));  // [n_embd, T]
        x = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, x, n_embd, 1, T), n_embd, hc, T, 1);

        std::vector<Selection> sels(group.parts.size());  // a "shared" layer reuses the selection of the full layer before it
        for (uint32_t il = 0; il < hp.n_trunk(); ++il) {
            const LayerWeights & w = model.layers[il];
            ggml_tensor *post, *comb;
            b.use_cpu_kernels(on_cpu(w.hc_attn_fn));

            ggml_tensor * cur = b.rms(b.hc_pre(x, w.hc_attn_fn, w.hc_attn_scale, w.hc_attn_base, &post, &comb), w.attn_norm);
            if (hp.is_kda(il)) {
                cur = b.kda(cur, w, il);
            } else {
                if (hp.idx_full[il]) sels.assign(group.parts.size(), Selection{});
                cur = b.dsa(cur, w, il, hp.idx_full[il], sels);
                for (size_t p = 0; p < sels.size(); ++p) {
                    GraphPart & part = *group.parts[p];
                    part.selections.push_back({sels[p].pools, sels[p].whole_group ? part.row0 : 0});
                    if (hp.idx_full[il]) ggml_format_name(sels[p].pools, "pools-%u", il);
                }
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
        ggml_tensor * hidden = b.rms(ggml_reshape_2d(ctx, mean, n_embd, T), model.output_norm);
        ggml_set_name(hidden, "hidden");
        ggml_set_output(hidden);
        ggml_tensor * out = group.outputs(ctx, hidden);
        b.use_cpu_kernels(on_cpu(model.output));
        ggml_tensor * logits = b.mm(model.output, out);
        ggml_set_name(logits, "logits");
        ggml_set_output(logits);
        for (GraphPart * p : group.parts) {
            for (const GraphPart::Selected & s : p->selections) {
                ggml_set_output(s.pools);
                ggml_build_forward_expand(g.gf, s.pools);
            }
        }
        ggml_build_forward_expand(g.gf, logits);
        g.hidden.push_back(hidden);
        g.logits.push_back(logits);
    }
}

void TrunkGraph::set_inputs(const int32_t * tokens, const std::vector<int64_t> & n_past) {
    inp_tokens->set_input(tokens);
    size_t i = 0;
    for (GraphPart & p : parts.parts) {
        p.kpool.n_past = n_past.at(i++);  // what the custom ops read (they point to the part's params)
        if (p.cache_rows) p.cache_rows->set_input(p.kpool.n_past);
        if (p.kpool_rows) p.kpool_rows->set_input(p.kpool);
    }
    for (const RowGroup & group : parts.groups) {
        for (const GraphPart * p : group.parts) group.row_scale->set_input(p->kpool, p->row0, p->n_rows);
        group.set_kpool_rows();
        group.set_out_rows();
        group.set_cells();
    }
}

}  // namespace glm5next
