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
