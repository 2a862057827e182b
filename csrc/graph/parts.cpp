#include "graph/parts.h"

#include <algorithm>
#include <vector>

namespace glm5next {

GraphPart & GraphParts::add(const CacheView & cache, int64_t n_rows, int64_t n_out, int64_t few_max, bool one_group) {
    const bool few = n_rows <= few_max;
    if (groups.empty() || (!one_group && (!groups.back().few || !few))) {
        RowGroup g;
        g.row0 = this->n_rows();
        g.few = few;
        groups.push_back(std::move(g));
    }
    RowGroup & g = groups.back();
    g.few = g.few && few;
    GraphPart & p = parts.emplace_back();
    p.cache = cache;
    p.n_rows = n_rows;
    p.row0 = g.n_rows;
    p.n_out = n_out;
    p.out_row0 = g.n_out;
    g.n_rows += n_rows;
    g.n_out += n_out;
    g.parts.push_back(&p);
    return p;
}

ggml_tensor * RowGroup::outputs(ggml_context * ctx, ggml_tensor * x) {
    if (parts.size() == 1 && n_out == n_rows) return x;
    if (parts.size() == 1 && n_out == 1) return ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], (n_rows - 1) * x->nb[1]);
    out_rows.emplace(ctx, GGML_TYPE_I32, n_out, 1, "inp_out_rows");
    return ggml_get_rows(ctx, x, out_rows->t);
}

void RowGroup::set_out_rows() const {
    if (!out_rows) return;
    std::vector<int32_t> rows;
    for (const GraphPart * p : parts) {
        for (int64_t r = p->row0 + p->n_rows - p->n_out; r < p->row0 + p->n_rows; ++r) rows.push_back((int32_t) r);
    }
    out_rows->set_input(rows.data());
}

bool RowGroup::over_cells() const {
    if (parts.size() < 2) return false;
    return std::all_of(parts.begin(), parts.end(), [](const GraphPart * p) { return p->cache.cell >= 0; });
}

bool RowGroup::kda_over_cells() const {
    if (!over_cells()) return false;
    return std::all_of(parts.begin(), parts.end(), [&](const GraphPart * p) {
        return p->n_rows == parts[0]->n_rows && p->keep_snapshots == parts[0]->keep_snapshots;
    });
}

bool RowGroup::selects_at_once() const {
    if (!over_cells()) return false;
    const GraphPart & first = *parts[0];
    for (size_t p = 0; p < parts.size(); ++p) {
        const GraphPart & part = *parts[p];
        if (part.cache.cell != first.cache.cell + (int32_t) p || part.n_rows != first.n_rows ||
            part.layout.n_kv != 0 || part.layout.n_pool != first.layout.n_pool) {
            return false;
        }
    }
    return true;
}

void RowGroup::set_kpool_rows() const {
    if (!kpool_rows) return;
    for (const GraphPart * p : parts) kpool_rows->set_input(p->kpool, p->row0, p->n_rows);
}

InputCells & RowGroup::cells_input(const HParams & hp) {
    if (!cells) {
        std::vector<CellPart> at;
        for (const GraphPart * p : parts) {
            at.push_back(CellPart{p->cache.cell, p->n_rows, p->cache.n_ctx, hp.n_pooled((uint32_t) p->cache.n_ctx)});
        }
        cells.emplace(std::move(at));
    }
    return *cells;
}

void RowGroup::set_cells() const {
    if (!cells) return;
    std::vector<int64_t> n_past;
    for (const GraphPart * p : parts) n_past.push_back(p->kpool.n_past);
    cells->set_input(n_past);
}

ggml_tensor * rows_view(ggml_context * ctx, ggml_tensor * t, int dim, int64_t r0, int64_t n) {
    if (r0 == 0 && n == t->ne[dim]) return t;
    int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
    ne[dim] = n;
    return ggml_view_4d(ctx, t, ne[0], ne[1], ne[2], ne[3], t->nb[1], t->nb[2], t->nb[3], r0 * t->nb[dim]);
}

}  // namespace glm5next
