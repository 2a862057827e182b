// A glm5next GGUF loaded for inference: hyper-parameters and weights (memory-mapped, never copied).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "model/error.h"
#include "model/hparams.h"
#include "model/kv_override.h"
#include "model/layer_weights.h"
#include "model/vocab.h"

namespace glm5next {

// One tensor the loader reads (docs/gguf.md, Tensors): its GGUF name, ggml shape (trailing 1s dropped) and whether a
// file must hold it.
struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;
    bool required = true;
};

// How a file's weights reach memory (llama.cpp's llama_model_params use_mmap and use_mlock; llama-server's --mmap /
// --no-mmap and --mlock).
struct LoadOptions {
    // true: the file is mapped and every page faulted in at load (MAP_POPULATE, as llama.cpp prefetches), shared with
    // the page cache; false: read into anonymous memory (a copy, e.g. for a file on a network filesystem)
    bool mmap = true;
    bool mlock = false;  // the weights' pages locked in RAM (mlock): never swapped or dropped
};

struct Model {
    HParams hp;
    ggml_tensor *tok_embd = nullptr, *output_norm = nullptr, *output = nullptr;
    std::vector<LayerWeights> layers;  // [n_layer_all]

    // Loads `path`, applies `overrides` before any hyper-parameter is read or checked. Throws ModelError
    // naming the file, key or tensor for every malformed input (never aborts).
    static std::unique_ptr<Model> load(const std::string & path, const std::vector<KvOverride> & overrides,
                                       const LoadOptions & options = {});
    // Reads and checks only the hyper-parameters of `path` (no tensors, no vocabulary), with the same rules and
    // errors as load: what the converter runs on the metadata it is about to write.
    static HParams load_hparams(const std::string & path, const std::vector<KvOverride> & overrides);
    ~Model();

    std::string path;
    std::vector<KvOverride> kv_overrides;          // the overrides applied, in order, keys spelled as the file's
    LoadOptions options;                           // as loaded
    // With options.mlock: whether the pages were locked (mlock fails past RLIMIT_MEMLOCK; llama.cpp then warns and
    // goes on unlocked, and so does the caller: Python's Model warns); its errno's text when not.
    bool locked = false;
    std::string lock_error;
    std::map<std::string, ggml_tensor *> tensors;  // by GGUF name
    std::vector<TensorSpec> tensor_table;           // every tensor the loader looked for, in the order it did
    Vocab vocab;
    // A draft-only file (converter --mtp-only): the NextN layer, token_embd, output_norm and output, but no trunk
    // layer tensors; layers[0 .. n_trunk) are then all nullptr.
    bool draft_only = false;

    // The file's metadata after overrides (read it with the checks of gguf_keys.h, never gguf_get_val_* blindly).
    const gguf_context * gguf() const;

    // Places weights on devices (docs/runtime.md, placement): `device_of` maps GGUF tensor names to ggml device names
    // ("RPC0", "CUDA0", ...); each named tensor is copied from the mapping into a weight buffer of its device and
    // every pointer to it (layers, tok_embd, ...) follows. Tensors not named, or named "CPU", stay memory-mapped
    // (zero-copy). Call once, before an Engine uses the model. Throws ModelError naming an unknown tensor or
    // device, or a buffer that cannot be allocated.
    void place(const std::map<std::string, std::string> & device_of);
    // The devices other than the CPU that hold weights, in the order place() met them.
    const std::vector<ggml_backend_dev_t> & devices() const { return devices_; }

    struct Impl;
    std::unique_ptr<Impl> impl;  // gguf context, mmap, buffers

private:
    std::vector<ggml_backend_dev_t> devices_;
};

// The device whose memory holds `buffer`: its buffer type's device, the CPU for ggml's CPU buffer types (which
// name no device) and the memory-mapped file.
ggml_backend_dev_t device_of(ggml_backend_buffer_t buffer);
// The device whose memory holds `weight` (see above); a view's is its source's (a view gets its buffer only when a
// graph is allocated: a view of a cache on another device, built into a graph, has none yet and is not on the CPU).
ggml_backend_dev_t device_of(const ggml_tensor * weight);
// Whether `weight` lives in CPU memory (the mapping or a CPU buffer).
bool on_cpu(const ggml_tensor * weight);

}  // namespace glm5next
