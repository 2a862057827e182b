// ggml_concat of f32 tensors as one CPU op of our own that copies whole rows and shares them among the threads.
#pragma once

#include <vector>

#include "ggml.h"

namespace glm5next {

// The pieces joined along dimension `dim` (0..3) in order, as ggml_concat joins two: f32 pieces of equal sizes but
// in `dim`, with any strides (a piece whose rows are not contiguous, a transposed one say, is read value by value);
// returns f32 with their sizes but ne[dim] = the sum of theirs, contiguous, the same values (copies). One node for up
// to GGML_MAX_SRC - 1 pieces (ggml_concat's chain makes one per piece but the first, each copying all the pieces
// before it again); the one piece itself when there is one.
// Why not ggml's op: ggml-cpu's concat of f32 (ggml_compute_forward_concat_f32, ops.cpp) copies value by value and
// gives each thread whole slices of dimension 2, so a 2-D tensor (KDA's q|k|v projections and conv windows,
// graph/blocks.cpp) is copied by one thread while the others wait at the barrier. Measured (bench preset q8_0, AMD
// EPYC, AVX2, -t 2, op profile): a 214-row prompt chunk's CONCAT nodes took 58 ms of ~1270 (45 nodes).
// Throws std::invalid_argument naming the piece that is not f32 or does not fit, or for no pieces.
ggml_tensor * concat_f32(ggml_context * ctx, const std::vector<ggml_tensor *> & pieces, int dim);

}  // namespace glm5next
