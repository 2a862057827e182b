// Whether this build compiles our x86-64 code: the AVX-512 few-row kernels (graph/q8_0_rows_ops.h,
// graph/float_rows_ops.h: <immintrin.h>, function target attributes, __builtin_cpu_supports) and the instruction-set
// clones of sparse attention (graph/sparse_attention_ops.cpp). 1 on x86-64 with GCC or Clang unless
// GLM5NEXT_NO_X86_KERNELS is defined; 0 elsewhere (aarch64 Linux), where the kernels' *_kernel_available() say false
// and the graphs use ggml's ops, as on an x86 CPU without AVX-512. tests/csrc/test_x86_code_is_guarded.py builds our
// sources with GLM5NEXT_NO_X86_KERNELS and checks that no x86-only code is left in them.
#pragma once

#if defined(__x86_64__) && !defined(GLM5NEXT_NO_X86_KERNELS)
#define GLM5NEXT_X86_KERNELS 1
#else
#define GLM5NEXT_X86_KERNELS 0
#endif

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace glm5next {

#if GLM5NEXT_X86_KERNELS
// What each of our few-row kernels needs at least: AVX2 with FMA and F16C (the AVX-512 ones more besides).
inline bool cpu_has_avx2_fma_f16c() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#endif

// Whether our few-row kernels may use AVX-512 where the CPU has it: not when the environment sets
// GLM5NEXT_CPU_KERNELS=avx2, which makes them choose what a CPU without AVX-512 runs (the AVX2 q8_0 kernel; the AVX2
// f16 and f32 kernel, which gives ggml's bits only with an AVX2 ggml: with an AVX-512 one, ggml's ops), so that those
// paths are tested on an AVX-512 machine (tests/csrc/test_q8_0_rows.py) and can be compared there. "native" or
// unset: what the CPU has. Read when a kernel is chosen (once per process).
// Throws std::invalid_argument for any other value, naming it.
inline bool avx512_kernels_allowed() {
    const char * v = std::getenv("GLM5NEXT_CPU_KERNELS");
    const std::string value = v == nullptr ? "native" : v;
    if (value != "native" && value != "avx2") {
        throw std::invalid_argument("GLM5NEXT_CPU_KERNELS = \"" + value + "\": expected \"native\" or \"avx2\"");
    }
    return value == "native";
}

}  // namespace glm5next
