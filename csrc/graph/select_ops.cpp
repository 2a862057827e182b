#include "graph/select_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace glm5next {

namespace {

// Indices of the k largest values, best first; exact ties go to the lower index.
void top_k_indices(const float * v, const std::vector<int32_t> & candidates, int64_t k, std::vector<int32_t> & out) {
    out = candidates;
    k = std::min<int64_t>(k, (int64_t) out.size());
    std::partial_sort(out.begin(), out.begin() + k, out.end(), [v](int32_t a, int32_t b) {
        return v[a] > v[b] || (v[a] == v[b] && a < b);
    });
    out.resize(k);
}

void kpool_top_k_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const auto * p = static_cast<const KpoolParams *>(userdata);
    const ggml_tensor * scores = dst->src[0];
    const int64_t n_pool = scores->ne[0], n_tokens = scores->ne[1];
    std::vector<int32_t> cand, best;
    for (int64_t t = ith; t < n_tokens; t += nth) {
        const float * s = (const float *) ((const char *) scores->data + t * scores->nb[1]);
        const int64_t n_complete = std::min(n_pool, n_candidates(*p, t));
        cand.resize(n_complete);
        std::iota(cand.begin(), cand.end(), 0);
        top_k_indices(s, cand, p->n_top_pool, best);
        auto * out = (int32_t *) ((char *) dst->data + t * dst->nb[1]);
        for (int64_t i = 0; i < dst->ne[0]; ++i) {
            out[i] = i < (int64_t) best.size() ? best[i] : -1;
        }
    }
}

int64_t n_sel(const KpoolParams & p) {
    return p.n_top_pool * p.kpool + (p.select_tail ? p.kpool - 1 : 0);
}

void kpool_mask_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const auto * p = static_cast<const KpoolParams *>(userdata);
    const ggml_tensor * sel = dst->src[0];
    const int64_t n_kv = dst->ne[0];
    thread_local std::vector<int32_t> rows;
    rows.resize(n_sel(*p));
    for (int64_t t = ith; t < dst->ne[1]; t += nth) {
        float * m = (float *) ((char *) dst->data + t * dst->nb[1]);
        std::fill(m, m + n_kv, -INFINITY);
        const auto * pools = (const int32_t *) ((const char *) sel->data + t * sel->nb[1]);
        const int64_t n = selected_rows(*p, pools, sel->ne[0], t, rows.data());
        for (int64_t i = 0; i < n; ++i) m[rows[i]] = 0.0f;
        if (n == 0) m[0] = 0.0f;  // keeps softmax finite; the row's output is zeroed (row_has_keys)
    }
}

void kpool_rows_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const auto * p = static_cast<const KpoolParams *>(userdata);
    const ggml_tensor * sel = dst->src[0];
    for (int64_t t = ith; t < dst->ne[1]; t += nth) {
        auto * rows = (int32_t *) ((char *) dst->data + t * dst->nb[1]);
        const auto * pools = (const int32_t *) ((const char *) sel->data + t * sel->nb[1]);
        const int64_t n = selected_rows(*p, pools, sel->ne[0], t, rows);
        std::fill(rows + n, rows + dst->ne[0], 0);
    }
}

void kpool_rows_mask_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const auto * p = static_cast<const KpoolParams *>(userdata);
    const ggml_tensor * sel = dst->src[0];
    thread_local std::vector<int32_t> rows;
    rows.resize(dst->ne[0]);
    for (int64_t t = ith; t < dst->ne[3]; t += nth) {
        auto * m = (float *) ((char *) dst->data + t * dst->nb[3]);
        const auto * pools = (const int32_t *) ((const char *) sel->data + t * sel->nb[1]);
        const int64_t n = std::max<int64_t>(1, selected_rows(*p, pools, sel->ne[0], t, rows.data()));
        std::fill(m, m + n, 0.0f);
        std::fill(m + n, m + dst->ne[0], -INFINITY);
    }
}

void moe_route_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const auto * p = static_cast<const MoeRouteParams *>(userdata);
    const ggml_tensor * logits = dst->src[0];
    const auto * bias = (const float *) dst->src[1]->data;
    const int64_t n_expert = logits->ne[0], n_tokens = logits->ne[1], k = p->n_expert_used;
    const int64_t per_group = n_expert / p->n_group;
    std::vector<float> s(n_expert), choice(n_expert), group_score(p->n_group);
    std::vector<int32_t> all_groups(p->n_group), groups, cand, top2, best;
    std::iota(all_groups.begin(), all_groups.end(), 0);
    for (int64_t t = ith; t < n_tokens; t += nth) {
        const float * l = (const float *) ((const char *) logits->data + t * logits->nb[1]);
        for (int64_t e = 0; e < n_expert; ++e) {
            s[e] = 1.0f / (1.0f + std::exp(-l[e]));
            choice[e] = s[e] + bias[e];
        }
        cand.clear();
        if (p->n_group > 1) {
            for (int64_t g = 0; g < p->n_group; ++g) {
                std::vector<int32_t> members(per_group);
                std::iota(members.begin(), members.end(), (int32_t) (g * per_group));
                top_k_indices(choice.data(), members, 2, top2);
                group_score[g] = 0.0f;
                for (int32_t e : top2) group_score[g] += choice[e];
            }
            top_k_indices(group_score.data(), all_groups, p->n_group_used, groups);
            std::sort(groups.begin(), groups.end());
            for (int32_t g : groups) {
                for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) cand.push_back((int32_t) e);
            }
        } else {
            cand.resize(n_expert);
            std::iota(cand.begin(), cand.end(), 0);
        }
        top_k_indices(choice.data(), cand, k, best);
        // the chosen weights' sum in double, rounded once: ggml's CPU sum_rows (ggml_vec_sum_f32), which a layer
        // on an RPC device of a CPU (BlockBuilder::route, ggml's standard ops) and llama.cpp use; a GPU's kernel
        // may sum otherwise (not measured). A float sum rounds after every term: from 3 experts on it can differ
        // in the last bit, and a q8_0 file's activation rounding can carry that into the logits (measured: 2.6 on
        // the bench preset, placed against the CPU, before this)
        double sum = 0.0;
        for (int32_t e : best) sum += (double) s[e];
        const float norm = (float) sum;
        auto * out = (float *) ((char *) dst->data + t * dst->nb[1]);
        for (int64_t i = 0; i < k; ++i) {
            out[i] = (float) best[i];
            out[k + i] = (p->norm && norm > 0.0f ? s[best[i]] / norm : s[best[i]]) * p->scale;
        }
    }
}

}  // namespace

int64_t n_candidates(const KpoolParams & p, int64_t t) { return (p.n_past + t + 1) / p.kpool; }

void canonical_pools(const KpoolParams & p, int32_t * pools, int64_t n_pools, int64_t t) {
    const int64_t n_cand = n_candidates(p, t);
    for (int64_t i = 0; i < n_pools; ++i) {
        if (pools[i] < 0 || pools[i] >= n_cand) pools[i] = -1;
    }
}

int64_t selected_rows(const KpoolParams & p, const int32_t * pools, int64_t n_pools, int64_t t, int32_t * out) {
    int64_t n = 0;
    thread_local std::vector<int32_t> chosen;  // reused: no allocation per row once warm
    chosen.assign(pools, pools + n_pools);
    canonical_pools(p, chosen.data(), n_pools, t);
    chosen.erase(std::remove(chosen.begin(), chosen.end(), -1), chosen.end());
    std::sort(chosen.begin(), chosen.end());
    for (int32_t m : chosen) {
        for (int64_t i = 0; i < p.kpool; ++i) out[n++] = (int32_t) (m * p.kpool + i);
    }
    const int64_t pos = p.n_past + t;
    if (p.select_tail) {
        for (int64_t r = (pos + 1) / p.kpool * p.kpool; r <= pos; ++r) out[n++] = (int32_t) r;
    }
    return n;
}

bool row_has_keys(const KpoolParams & p, int64_t t) {
    return p.select_tail || p.n_past + t + 1 >= p.kpool;
}

ggml_tensor * kpool_top_k(ggml_context * ctx, ggml_tensor * scores, const KpoolParams * p) {
    ggml_tensor * args[] = {scores};
    return ggml_custom_4d(ctx, GGML_TYPE_I32, p->n_top_pool, scores->ne[1], 1, 1, args, 1, kpool_top_k_op,
                          GGML_N_TASKS_MAX, (void *) p);
}

ggml_tensor * kpool_mask(ggml_context * ctx, ggml_tensor * sel, int64_t n_kv, const KpoolParams * p) {
    ggml_tensor * args[] = {sel};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, n_kv, sel->ne[1], 1, 1, args, 1, kpool_mask_op, GGML_N_TASKS_MAX,
                          (void *) p);
}

ggml_tensor * kpool_rows(ggml_context * ctx, ggml_tensor * sel, const KpoolParams * p) {
    ggml_tensor * args[] = {sel};
    return ggml_custom_4d(ctx, GGML_TYPE_I32, n_sel(*p), sel->ne[1], 1, 1, args, 1, kpool_rows_op, GGML_N_TASKS_MAX,
                          (void *) p);
}

ggml_tensor * kpool_rows_mask(ggml_context * ctx, ggml_tensor * sel, const KpoolParams * p) {
    ggml_tensor * args[] = {sel};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, n_sel(*p), 1, 1, sel->ne[1], args, 1, kpool_rows_mask_op,
                          GGML_N_TASKS_MAX, (void *) p);
}

ggml_tensor * moe_route(ggml_context * ctx, ggml_tensor * logits, ggml_tensor * bias, const MoeRouteParams * p) {
    ggml_tensor * args[] = {logits, bias};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, 2 * p->n_expert_used, logits->ne[1], 1, 1, args, 2, moe_route_op,
                          GGML_N_TASKS_MAX, (void *) p);
}

}  // namespace glm5next
