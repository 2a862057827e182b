// Sparse MLA attention over each row's selected latent rows (docs/model.md, DSA) as one CPU op of our own: the rows are
// read where the cache holds them instead of being gathered into a copy first.
#pragma once

#include "ggml.h"

namespace glm5next {

// For each row t and head h, attention of the absorbed query over the latent rows row t selected:
//   a[s]         = q_abs[:, t, h] . latent[:, rows[s, t]] * scale + mask[s, t]
//   out[:, h, t] = sum_s softmax(a)[s] * latent[:, rows[s, t]]
// q_abs f32 [kvr, T, n_head] (rows of kvr floats; a view of a batch's rows may skip between heads); latent f32, f16, bf16, q8_0 or q4_0 [kvr, n_kv] (the cache, rows contiguous; other than f32 widened as read); rows i32 [n_sel, T]
// and mask f32 [n_sel, 1, 1, T] as graph/select_ops.h kpool_rows / kpool_rows_mask give them (0 or -inf; a row with
// no key keeps slot 0 at 0, so its softmax stays finite and the caller zeroes it). `scale` (1/sqrt(qk head dim))
// must outlive the graph. Returns f32 [kvr, 1, n_head, T], the layout ggml's gathered composition gives (W_vb next).
// Why not ggml's ops (get_rows of the selected rows, a transposed copy of them, two batched matmuls and a masked
// softmax): the gathered copy is kvr x n_sel floats per row, 271 MiB per DSA layer for a 512-row prompt ubatch on the
// bench preset, and it made a prompt ubatch at depth slower than the dense pass at depth 0 (perf, depth 8192: memcpy
// 15% of all samples, 1.5% at depth 0). One task computes whole rows t, so a row's output does not depend on the
// ubatch (batch-invariant verify passes).
ggml_tensor * sparse_attention(ggml_context * ctx, ggml_tensor * q_abs, ggml_tensor * latent, ggml_tensor * rows,
                               ggml_tensor * mask, const float * scale);

}  // namespace glm5next
