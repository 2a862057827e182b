// The one exception type of the model stage: every error about a model file, its keys, tensors or overrides.
#pragma once

#include <stdexcept>

namespace glm5next {

// Every error about a model file; bindings turn it into a Python exception (ValueError) naming the culprit.
struct ModelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace glm5next
