// ggml's x86 SIMD sums, in ggml's order of adds, for this project's kernels that give ggml's bits (graph/
// delta_rule_ops.h, graph/float_rows_ops.h): one home for what they copy of ggml-cpu/simd-mappings.h.
#pragma once

#include "graph/cpu_arch.h"

#if GLM5NEXT_X86_KERNELS
#include <immintrin.h>

namespace glm5next {

// GGML_F32x8_REDUCE with GGML_F32_ARR = 4 (AVX/AVX2: GGML_F32_STEP 32 over 4 registers of 8): the partial sums
// added 0+2 and 1+3, then 0+1, the two halves added and the four lanes by two horizontal adds. What
// ggml_vec_dot_f32 and ggml_vec_dot_f16 return on such a CPU, before their leftovers.
__attribute__((target("avx2,fma"))) inline float f32x8_reduce4(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {
    s0 = _mm256_add_ps(s0, s2);
    s1 = _mm256_add_ps(s1, s3);
    s0 = _mm256_add_ps(s0, s1);
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// GGML_F32x16_REDUCE with GGML_F32_ARR = 4 (AVX-512: GGML_F32_STEP 64 over 4 registers of 16): the partial sums
// added 0+2 and 1+3, then 0+1, and the 16 lanes by _mm512_reduce_add_ps (the compiler's sequence: ggml's own call,
// built by the same compiler). What ggml_vec_dot_f32 returns on a ggml built for AVX-512, before its leftovers.
__attribute__((target("avx512f"))) inline float f32x16_reduce4(__m512 s0, __m512 s1, __m512 s2, __m512 s3) {
    s0 = _mm512_add_ps(s0, s2);
    s1 = _mm512_add_ps(s1, s3);
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

}  // namespace glm5next
#endif  // GLM5NEXT_X86_KERNELS
