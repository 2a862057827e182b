#include "graph/draft_head.h"

#include <algorithm>
#include <stdexcept>

#include "model/kernel_limits.h"

namespace glm5next {

void build_draft_graph(DraftGraph & g, ggml_context * ctx, const Model & model, const LayerWeights & w,
                       const std::vector<DraftRows> & rows) {
    const HParams & hp = model.hp;
    const uint32_t il = hp.n_trunk();
    g.gf = ggml_new_graph_custom(ctx, graph_size(hp, rows.size()), false);
    g.params.moe = {hp.n_expert_used, hp.n_expert_groups, hp.n_group_used, hp.expert_weights_norm, hp.expert_weights_scale};
    g.inp_saved_pools.assign(rows.size(), std::nullopt);
    g.pools.assign(rows.size(), GraphPart::Selected{});
    g.logits.clear();
    g.z.clear();
    // one row group where the layer multiplies on a GPU backend (as the trunk, graph/trunk.h: trunk_in_one_pass)
    const bool one_pass = !multiplies_rows_alone(w.eh_proj);
    for (size_t i = 0; i < rows.size(); ++i) {
        const DraftRows & r = rows[i];
        if (r.shared && r.n_rows != 1) throw std::logic_error("a draft step that reuses a selection is one row");
        GraphPart & p = g.parts.add(r.cache, r.n_rows, r.output ? 1 : 0, kGatherMaxRows, one_pass);
        p.layout = graph_layout(hp, r.cache.n_ctx, r.cache.n_past, r.n_rows);
        p.kpool = {r.cache.n_past, hp.idx_kpool, hp.idx_top_k / hp.idx_kpool, hp.idx_select_tail};
        p.kpool_saved = p.kpool;  // its n_past: the row that made the reused selection (set_inputs)
        if (r.shared) g.inp_saved_pools[i].emplace(ctx, GGML_TYPE_I32, p.kpool.n_top_pool, 1, "inp_saved_pools");
    }
    const int64_t n_all = g.parts.n_rows();
    g.inp_hidden.emplace(ctx, GGML_TYPE_F32, hp.n_embd, n_all, "inp_hidden");
    g.inp_tokens.emplace(ctx, GGML_TYPE_I32, n_all, 1, "inp_tokens");

    size_t first = 0;  // index of the group's first part
    for (RowGroup & group : g.parts.groups) {
        const int64_t T = group.n_rows;
        if (group.n_out > 0) group.row_scale.emplace(ctx, hp, T);  // (rows only: no attention to scale)
        BlockBuilder b(ctx, g.gf, hp, g.params, group);
        const bool cpu = on_cpu(w.eh_proj);
        b.use_cpu_kernels(cpu);
        b.select_groups_at_once(true);

        // u = eh_proj [RMSNorm_e(E[x_{p+1}]); RMSNorm_h(h_p)], embedding half first
        ggml_tensor * tokens = rows_view(ctx, g.inp_tokens->t, 0, group.row0, T);
        ggml_tensor * embd = ggml_get_rows(ctx, w.nextn_embd ? w.nextn_embd : model.tok_embd, tokens);
        ggml_tensor * hidden = rows_view(ctx, g.inp_hidden->t, 1, group.row0, T);
        ggml_tensor * eh = b.concat({b.rms(embd, w.enorm), b.rms(hidden, w.hnorm)}, 0);
        ggml_tensor * u = b.mm(w.eh_proj, eh);

        // a shared step's reused selection: its rows from the saved pools, with this project's CPU ops on the CPU,
        // else with ggml's standard ops where the layer runs (graph/select_std.h: no round trip to the CPU)
        std::vector<Selection> sels(group.parts.size());
        const size_t n_parts = group.parts.size();
        const bool all_shared = std::all_of(g.inp_saved_pools.begin() + first, g.inp_saved_pools.begin() + first + n_parts,
                                            [](const std::optional<InputArray> & in) { return in.has_value(); });
        if (all_shared && b.attends_at_once(w)) {  // every part's saved pools as one selection of the group's rows
            std::vector<ggml_tensor *> saved;
            for (size_t p = 0; p < n_parts; ++p) saved.push_back(g.inp_saved_pools[first + p]->t);
            group.kpool_rows.emplace(ctx, T);
            Selection s{b.concat(saved, 1), &group.parts[0]->kpool_saved, true};
            s.whole_group = true;
            sels.assign(n_parts, s);
        }
        for (size_t p = 0; p < n_parts && !sels[p].whole_group; ++p) {
            if (g.inp_saved_pools[first + p]) {
                GraphPart & part = *group.parts[p];
                if (!cpu && !part.kpool_rows) part.kpool_rows.emplace(ctx, part.n_rows);
                sels[p] = Selection{g.inp_saved_pools[first + p]->t, &part.kpool_saved, !cpu};
            }
        }
        if (group.n_out == 0) {  // rows only: their cache rows are written, nothing else is read
            b.dsa(b.rms(u, w.attn_norm), w, il, true, sels, false);
            first += group.parts.size();
            g.z.push_back(nullptr);
            g.logits.push_back(nullptr);
            continue;
        }
        ggml_tensor * a = ggml_add(ctx, u, b.dsa(b.rms(u, w.attn_norm), w, il, true, sels));
        for (size_t p = 0; p < group.parts.size(); ++p) {
            if (!g.inp_saved_pools[first + p]) {
                g.pools[first + p] = {sels[p].pools, sels[p].whole_group ? group.parts[p]->row0 : 0};
                ggml_set_name(sels[p].pools, "draft_pools");
                ggml_set_output(sels[p].pools);
                ggml_build_forward_expand(g.gf, sels[p].pools);
            }
        }
        first += group.parts.size();
        // Only each part's last row's output is read (z, logits): the FFN runs on those rows alone, the rows before
        // them were needed for the cache rows they wrote. Rows written without drafting (64 at a time) cost a third
        // less on the bundled model (q8_0, -t 1), a draft step's output is unchanged (its rows multiply as one row
        // alone, BlockBuilder::mm).
        a = group.outputs(ctx, a);
        const BlockBuilder last = b.out_rows(a->ne[1]);
        ggml_tensor * o = ggml_add(ctx, a, last.moe(last.rms(a, w.ffn_norm), w, (int) il));
        ggml_tensor * z = last.rms(o, w.shared_head_norm);
        ggml_tensor * head = w.nextn_head ? w.nextn_head : model.output;
        BlockBuilder out = last;
        out.use_cpu_kernels(on_cpu(head));
        ggml_tensor * logits = out.mm(head, z);
        ggml_set_name(z, "draft_z");
        ggml_set_name(logits, "draft_logits");
        ggml_set_output(z);
        ggml_set_output(logits);
        ggml_build_forward_expand(g.gf, logits);
        g.z.push_back(z);
        g.logits.push_back(logits);
    }
}

const KpoolParams & DraftGraph::selected_at(const GraphPart & p, size_t i) const {
    return inp_saved_pools[i] ? p.kpool_saved : p.kpool;
}

void DraftGraph::set_inputs(const float * hidden, const int32_t * tokens, const std::vector<int64_t> & pos0,
                            const std::vector<const int32_t *> & saved_pools, const std::vector<int64_t> & saved_p0) {
    inp_hidden->set_input(hidden);
    inp_tokens->set_input(tokens);
    size_t i = 0;
    for (GraphPart & p : parts.parts) {
        p.kpool.n_past = pos0.at(i);  // what the custom ops read (they point to the part's params)
        p.kpool_saved.n_past = saved_p0.at(i);
        if (p.cache_rows) p.cache_rows->set_input(p.kpool.n_past);
        if (inp_saved_pools[i]) inp_saved_pools[i]->set_input(saved_pools.at(i));
        if (p.kpool_rows) p.kpool_rows->set_input(selected_at(p, i));
        ++i;
    }
    i = 0;
    for (const RowGroup & group : parts.groups) {
        for (const GraphPart * p : group.parts) {
            if (group.row_scale) group.row_scale->set_input(selected_at(*p, i), p->row0, p->n_rows);
            if (group.kpool_rows) group.kpool_rows->set_input(selected_at(*p, i), p->row0, p->n_rows);
            ++i;
        }
        group.set_out_rows();
        group.set_cells();
    }
}

}  // namespace glm5next
