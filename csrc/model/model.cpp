// Model::load: open and validate a GGUF, apply --override-kv, read hyper-parameters, check tensors, then map
// the file read-only and point every tensor into the mapping (weights are never copied).
#include "model/model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "ggml-cpu.h"
#include "model/gguf_keys.h"
#include "model/tensors.h"
#include "model/kv_override.h"

namespace glm5next {

struct Model::Impl {
    gguf_context * gguf = nullptr;
    ggml_context * meta = nullptr;  // tensor metadata only (no_alloc); data lives in the mapping
    void * map = nullptr;
    size_t map_size = 0;
    ggml_backend_buffer_t buffer = nullptr;  // CPU buffer over `map`; does not own it
    // Weights placed on devices (Model::place): one metadata context and one buffer per device.
    std::vector<ggml_context *> placed_meta;
    std::vector<ggml_backend_buffer_t> placed;

    ~Impl() {
        for (ggml_backend_buffer_t b : placed) ggml_backend_buffer_free(b);
        for (ggml_context * c : placed_meta) ggml_free(c);
        if (buffer) ggml_backend_buffer_free(buffer);
        if (map) munmap(map, map_size);
        if (meta) ggml_free(meta);
        if (gguf) gguf_free(gguf);
    }
};

namespace {

// Read-only descriptor of the model file, closed on scope exit (the mapping outlives it).
class File {
public:
    explicit File(const std::string & path) : path_(path) {
        fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO would block until written to
        if (fd_ < 0) {
            throw ModelError(path + (errno == ENOENT ? ": no such file" : ": cannot open: " + std::string(strerror(errno))));
        }
        struct stat st {};
        if (fstat(fd_, &st) != 0) throw ModelError(path + ": cannot stat: " + strerror(errno));
        if (!S_ISREG(st.st_mode)) throw ModelError(path + ": not a regular file");
        size_ = size_t(st.st_size);
    }
    ~File() { close(fd_); }
    File(const File &) = delete;
    File & operator=(const File &) = delete;

    int fd() const { return fd_; }
    size_t size() const { return size_; }

    // Names a file that is not GGUF at all more plainly than ggml's reader can.
    void check_magic() const {
        char magic[4] = {};
        if (size_ < sizeof(magic) || pread(fd_, magic, sizeof(magic), 0) != ssize_t(sizeof(magic)) ||
            memcmp(magic, GGUF_MAGIC, sizeof(magic)) != 0) {
            throw ModelError(path_ + ": not a GGUF file (it does not start with the magic 'GGUF')");
        }
    }

private:
    std::string path_;
    int fd_ = -1;
    size_t size_ = 0;
};

// gguf_init_from_file does not read tensor data with no_alloc, so a cut-off data section is only found here.
void check_data_section(const gguf_context * ctx, size_t file_size, const std::string & path) {
    const size_t base = gguf_get_data_offset(ctx);
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx); ++i) {  // stored in offset order (gguf checks that)
        const size_t end = base + gguf_get_tensor_offset(ctx, i) + gguf_get_tensor_size(ctx, i);
        if (end > file_size) {
            throw ModelError(path + ": truncated: tensor " + gguf_get_tensor_name(ctx, i) + " needs bytes up to " +
                             std::to_string(end) + " but the file has " + std::to_string(file_size));
        }
    }
}

std::string read_arch(const gguf_context * ctx, const std::string & path) {
    const KeyReader kv(ctx, path, "");
    const auto arch = kv.get_str("general.architecture");
    if (!arch) throw ModelError(path + ": general.architecture is missing (expected 'glm5next' or 'glm5-next')");
    if (!is_known_arch(*arch)) {
        throw ModelError(path + ": unsupported architecture: expected 'glm5next' or 'glm5-next', found '" + *arch + "'");
    }
    return *arch;
}

// The hyper-parameters of `ctx` after `overrides` (refused when one would change nothing: check_override_keys);
// `applied`, when given, receives them as applied.
HParams read_overridden(gguf_context * ctx, const std::vector<KvOverride> & overrides, const std::string & path,
                        std::vector<KvOverride> * applied = nullptr) {
    const std::vector<AppliedOverride> done = apply_kv_overrides(ctx, overrides, path);
    const std::string arch = read_arch(ctx, path);
    std::set<std::string> asked;
    HParams hp = read_hparams(ctx, arch, path, &asked);
    check_override_keys(ctx, done, arch, asked, path);
    if (applied != nullptr) {
        for (const AppliedOverride & a : done) applied->push_back(a.kv);
    }
    return hp;
}

}  // namespace

const gguf_context * Model::gguf() const { return impl->gguf; }

Model::~Model() = default;

HParams Model::load_hparams(const std::string & path, const std::vector<KvOverride> & overrides) {
    const File file(path);
    file.check_magic();
    std::unique_ptr<gguf_context, decltype(&gguf_free)> gguf(
        gguf_init_from_file(path.c_str(), gguf_init_params{/*no_alloc=*/true, /*ctx=*/nullptr}), &gguf_free);
    if (!gguf) throw ModelError(path + ": not a readable GGUF file (truncated or corrupt?)");
    return read_overridden(gguf.get(), overrides, path);
}

namespace {

// The whole file in anonymous memory, read with pread (--no-mmap): page-aligned, as a CPU buffer needs; unmapped
// like the mapping.
void * read_whole(const File & file, const std::string & path) {
    void * mem = mmap(nullptr, file.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw ModelError(path + ": cannot allocate " + std::to_string(file.size()) + " bytes: " + strerror(errno));
    for (size_t at = 0; at < file.size();) {
        const ssize_t n = pread(file.fd(), static_cast<char *>(mem) + at, std::min<size_t>(file.size() - at, 1 << 26), (off_t) at);
        if (n <= 0) {
            const std::string why = n == 0 ? "unexpected end of file" : strerror(errno);
            munmap(mem, file.size());
            throw ModelError(path + ": read failed at byte " + std::to_string(at) + ": " + why);
        }
        at += size_t(n);
    }
    mprotect(mem, file.size(), PROT_READ);
    return mem;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string & path, const std::vector<KvOverride> & overrides,
                                   const LoadOptions & options) {
    const File file(path);
    file.check_magic();

    auto m = std::make_unique<Model>();
    m->path = path;
    m->impl = std::make_unique<Impl>();
    Impl & impl = *m->impl;
    impl.gguf = gguf_init_from_file(path.c_str(), gguf_init_params{/*no_alloc=*/true, /*ctx=*/&impl.meta});
    if (!impl.gguf) throw ModelError(path + ": not a readable GGUF file (truncated or corrupt?)");
    check_data_section(impl.gguf, file.size(), path);

    m->hp = read_overridden(impl.gguf, overrides, path, &m->kv_overrides);
    m->vocab = read_vocab(impl.gguf, m->hp, path);
    for (int64_t i = 0; i < gguf_get_n_tensors(impl.gguf); ++i) {
        const char * name = gguf_get_tensor_name(impl.gguf, i);
        m->tensors[name] = ggml_get_tensor(impl.meta, name);
    }
    bind_tensors(*m, path);

    // Everything is validated: map the file (or read it) and place each tensor at its offset there.
    m->options = options;
    if (options.mmap) {
        impl.map = mmap(nullptr, file.size(), PROT_READ, MAP_SHARED | MAP_POPULATE, file.fd(), 0);
        if (impl.map == MAP_FAILED) {
            impl.map = nullptr;
            throw ModelError(path + ": mmap failed: " + strerror(errno));
        }
    } else {
        impl.map = read_whole(file, path);
    }
    impl.map_size = file.size();
    if (options.mlock) {
        m->locked = mlock(impl.map, impl.map_size) == 0;
        if (!m->locked) m->lock_error = strerror(errno);
    }
    impl.buffer = ggml_backend_cpu_buffer_from_ptr(impl.map, impl.map_size);  // mmap is page-aligned, as required
    if (!impl.buffer) throw ModelError(path + ": cannot create a CPU buffer over the mapping");
    ggml_backend_buffer_set_usage(impl.buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    char * data = static_cast<char *>(impl.map) + gguf_get_data_offset(impl.gguf);
    for (int64_t i = 0; i < gguf_get_n_tensors(impl.gguf); ++i) {
        ggml_tensor * t = m->tensors.at(gguf_get_tensor_name(impl.gguf, i));
        if (ggml_backend_tensor_alloc(impl.buffer, t, data + gguf_get_tensor_offset(impl.gguf, i)) != GGML_STATUS_SUCCESS) {
            throw ModelError(path + ": cannot place tensor " + ggml_get_name(t) + " in the mapping");
        }
    }
    return m;
}

ggml_backend_dev_t device_of(ggml_backend_buffer_t buffer) {
    ggml_backend_dev_t dev = buffer ? ggml_backend_buft_get_device(ggml_backend_buffer_get_type(buffer)) : nullptr;
    return dev ? dev : ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

ggml_backend_dev_t device_of(const ggml_tensor * weight) {
    return device_of(weight->buffer || weight->view_src == nullptr ? weight->buffer : weight->view_src->buffer);
}

bool on_cpu(const ggml_tensor * weight) {
    return ggml_backend_dev_type(device_of(weight)) == GGML_BACKEND_DEVICE_TYPE_CPU;
}

void Model::place(const std::map<std::string, std::string> & device_of) {
    if (!devices_.empty()) throw ModelError(path + ": the weights are placed already");
    std::map<std::string, std::vector<std::string>> by_device;  // device -> tensor names, in name order
    for (const auto & [name, device] : device_of) {
        if (tensors.count(name) == 0) throw ModelError(path + ": placement names an unknown tensor " + name);
        if (device != "CPU") by_device[device].push_back(name);
    }
    for (const auto & [device, names] : by_device) {
        ggml_backend_dev_t dev = ggml_backend_dev_by_name(device.c_str());
        if (dev == nullptr) throw ModelError(path + ": placement names an unknown device " + device);
        ggml_context * meta = ggml_init({ggml_tensor_overhead() * names.size(), nullptr, true});
        impl->placed_meta.push_back(meta);
        std::vector<std::pair<ggml_tensor *, ggml_tensor *>> moves;  // (in the mapping, on the device)
        for (const std::string & name : names) {
            ggml_tensor * dst = ggml_dup_tensor(meta, tensors.at(name));
            ggml_set_name(dst, name.c_str());
            moves.emplace_back(tensors.at(name), dst);
        }
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(meta, ggml_backend_dev_buffer_type(dev));
        if (buf == nullptr) throw ModelError(path + ": cannot allocate the weight buffer on " + device);
        impl->placed.push_back(buf);
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        for (const auto & [src, dst] : moves) {
            ggml_backend_tensor_set(dst, src->data, 0, ggml_nbytes(src));
            tensors[ggml_get_name(dst)] = dst;
        }
        devices_.push_back(dev);
    }
    if (by_device.empty()) return;
    layers.clear();  // every weight pointer follows its tensor
    tensor_table.clear();
    bind_tensors(*this, path);
}

}  // namespace glm5next
