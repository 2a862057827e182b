#include "graph/select_std.h"

#include <algorithm>

namespace glm5next {

namespace {

// The indices 0..width-1 (of pools, of keys) for every row, as exact floats: f32 [width, n_tokens].
ggml_tensor * indices_per_row(ggml_context * ctx, int64_t width, int64_t n_tokens) {
    return ggml_repeat_4d(ctx, ggml_arange(ctx, 0.0f, (float) width, 1.0f), width, n_tokens, 1, 1);
}

// 1 where index m (an exact integer as f32, [.., n_tokens]) is no candidate of its row (m >= n_cand), else 0:
// step(m - n_cand + 0.5) is 1 exactly there.
ggml_tensor * beyond_candidates(ggml_context * ctx, ggml_tensor * m, ggml_tensor * n_cand) {
    return ggml_step(ctx, ggml_scale_bias(ctx, ggml_sub(ctx, m, n_cand), 1.0f, 0.5f));
}

// kSelectMasked where m is no candidate of its row, else 0.
ggml_tensor * mask_non_candidates(ggml_context * ctx, ggml_tensor * m, ggml_tensor * n_cand) {
    return ggml_scale(ctx, beyond_candidates(ctx, m, n_cand), kSelectMasked);
}

}  // namespace

ggml_tensor * kpool_top_k_std(ggml_context * ctx, ggml_tensor * scores, ggml_tensor * n_cand, int64_t n_top_pool) {
    const int64_t n_pool = scores->ne[0], n_tokens = scores->ne[1];
    const int64_t width = std::max(n_pool, n_top_pool);  // ggml's top-k needs k <= the row length
    if (width > n_pool) {
        scores = ggml_pad(ctx, scores, (int) (width - n_pool), 0, 0, 0);
    }
    scores = ggml_add(ctx, scores, mask_non_candidates(ctx, indices_per_row(ctx, width, n_tokens), n_cand));
    return ggml_cont(ctx, ggml_argsort_top_k(ctx, scores, (int) n_top_pool));
}

void kpool_rows_std(ggml_context * ctx, ggml_tensor * pools, const InputKpoolRows & in, int64_t kpool, int64_t n_kv,
                    ggml_tensor ** rows, ggml_tensor ** rows_mask) {
    const int64_t n_top = pools->ne[0], n_tokens = pools->ne[1], n_pool_rows = kpool * n_top;
    ggml_tensor * m = ggml_cast(ctx, pools, GGML_TYPE_F32);  // pool indices, exact as f32 below 2^24
    // the rows m*kpool + i of each chosen pool: [kpool, n_top, n_tokens]
    ggml_tensor * first = ggml_scale(ctx, ggml_reshape_3d(ctx, m, 1, n_top, n_tokens), (float) kpool);
    ggml_tensor * r = ggml_add(ctx, ggml_repeat_4d(ctx, first, kpool, n_top, n_tokens, 1),
                               ggml_arange(ctx, 0.0f, (float) kpool, 1.0f));
    r = ggml_clamp(ctx, ggml_reshape_2d(ctx, r, n_pool_rows, n_tokens), 0.0f, (float) (n_kv - 1));
    ggml_tensor * mask = ggml_reshape_3d(ctx, mask_non_candidates(ctx, m, in.n_cand), 1, n_top, n_tokens);
    mask = ggml_reshape_2d(ctx, ggml_repeat_4d(ctx, mask, kpool, n_top, n_tokens, 1), n_pool_rows, n_tokens);
    if (in.tail_rows) {
        r = ggml_concat(ctx, r, in.tail_rows, 0);
        mask = ggml_concat(ctx, mask, in.tail_mask, 0);
    }
    *rows = ggml_cast(ctx, r, GGML_TYPE_I32);
    *rows_mask = ggml_reshape_4d(ctx, mask, mask->ne[0], 1, 1, n_tokens);
}

ggml_tensor * kpool_tail_keys_std(ggml_context * ctx, ggml_tensor * n_cand, int64_t kpool, int64_t n_kv,
                                  int64_t n_keys) {
    const int64_t n_tokens = n_cand->ne[1];
    ggml_tensor * key = indices_per_row(ctx, n_keys, n_tokens);
    // row t's tail: the keys from its first incomplete pool's first row, n_cand*kpool, to its own position
    ggml_tensor * first = ggml_scale(ctx, n_cand, (float) kpool);
    ggml_tensor * pos = ggml_reshape_2d(ctx, ggml_arange(ctx, (float) (n_kv - n_tokens), (float) n_kv, 1.0f), 1, n_tokens);
    ggml_tensor * from = ggml_step(ctx, ggml_scale_bias(ctx, ggml_sub(ctx, key, first), 1.0f, 0.5f));  // key >= first
    ggml_tensor * upto = ggml_step(ctx, ggml_scale_bias(ctx, ggml_sub(ctx, key, pos), -1.0f, 0.5f));   // key <= pos
    return ggml_mul(ctx, from, upto);
}

ggml_tensor * kpool_mask_std(ggml_context * ctx, ggml_tensor * pools, ggml_tensor * n_cand, ggml_tensor * tail,
                             int64_t kpool, int64_t n_pool, int64_t n_keys) {
    const int64_t n_top = pools->ne[0], n_tokens = pools->ne[1];
    const int64_t width = std::max({n_pool, n_top, (n_keys + kpool - 1) / kpool});  // every pool index and key's pool
    // 1 for the candidate pools of each row, 0 else: [width, n_tokens]
    ggml_tensor * candidate = ggml_scale_bias(ctx, beyond_candidates(ctx, indices_per_row(ctx, width, n_tokens), n_cand),
                                              -1.0f, 1.0f);
    // 1 written at each row's chosen pools (a scatter: set_rows over rows of one element, row t's pools in batch t)
    ggml_tensor * none = ggml_reshape_3d(ctx, ggml_scale(ctx, candidate, 0.0f), 1, width, n_tokens);
    ggml_tensor * ones = ggml_scale_bias(ctx, ggml_cast(ctx, pools, GGML_TYPE_F32), 0.0f, 1.0f);
    ggml_tensor * chosen = ggml_set_rows(ctx, none, ggml_reshape_3d(ctx, ones, 1, n_top, n_tokens), pools);
    chosen = ggml_mul(ctx, ggml_reshape_2d(ctx, chosen, width, n_tokens), candidate);
    // every key of a chosen pool (pool m holds keys m*kpool .. m*kpool+kpool-1): [n_keys, n_tokens]
    ggml_tensor * keys = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, chosen, 1, width, n_tokens), kpool, width, n_tokens, 1);
    keys = ggml_view_2d(ctx, ggml_reshape_2d(ctx, keys, kpool * width, n_tokens), n_keys, n_tokens,
                        kpool * width * sizeof(float), 0);
    ggml_tensor * attended = tail ? ggml_add(ctx, tail, keys) : ggml_cont(ctx, keys);  // disjoint: tail keys >= n_cand*kpool
    return ggml_scale_bias(ctx, attended, -kSelectMasked, kSelectMasked);  // 1 -> 0 exactly, 0 -> kSelectMasked
}

}  // namespace glm5next
