// What this process runs on: the linked ggml and the CPU backend's features.
#pragma once

#include <string>

namespace glm5next {

// ggml's version string and the llama.cpp commit it was built from.
std::string ggml_version();
std::string ggml_commit();

// The CPU backend's feature flags, e.g. "AVX = 1 | AVX2 = 1 | ...".
std::string system_info();

}  // namespace glm5next
