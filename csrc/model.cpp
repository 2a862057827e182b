// Model::load: open and validate a GGUF, apply --override-kv, read hyper-parameters, check tensors, then map
// the file read-only and point every tensor into the mapping (weights are never copied).
#include "model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ggml-cpu.h"
#include "gguf_keys.h"
#include "model_parts.h"
#include "overrides.h"

namespace glm5next {

struct Model::Impl {
    gguf_context * gguf = nullptr;
    ggml_context * meta = nullptr;  // tensor metadata only (no_alloc); data lives in the mapping
    void * map = nullptr;
    size_t map_size = 0;
    ggml_backend_buffer_t buffer = nullptr;  // CPU buffer over `map`; does not own it

    ~Impl() {
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
        fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
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

}  // namespace

const gguf_context * Model::gguf() const { return impl->gguf; }

Model::~Model() {
    impl.reset();  // tensors point into the mapping: release it before the backend
    if (backend_cpu) ggml_backend_free(backend_cpu);
}

std::unique_ptr<Model> Model::load(const std::string & path, const std::vector<KvOverride> & overrides) {
    const File file(path);
    file.check_magic();

    auto m = std::make_unique<Model>();
    m->path = path;
    m->impl = std::make_unique<Impl>();
    Impl & impl = *m->impl;
    impl.gguf = gguf_init_from_file(path.c_str(), gguf_init_params{/*no_alloc=*/true, /*ctx=*/&impl.meta});
    if (!impl.gguf) throw ModelError(path + ": not a readable GGUF file (truncated or corrupt?)");
    check_data_section(impl.gguf, file.size(), path);

    apply_kv_overrides(impl.gguf, overrides, path);
    m->hp = read_hparams(impl.gguf, read_arch(impl.gguf, path), path);
    m->vocab = read_vocab(impl.gguf, m->hp, path);
    for (int64_t i = 0; i < gguf_get_n_tensors(impl.gguf); ++i) {
        const char * name = gguf_get_tensor_name(impl.gguf, i);
        m->tensors[name] = ggml_get_tensor(impl.meta, name);
    }
    bind_tensors(*m, path);

    // Everything is validated: map the file and place each tensor at its offset in the mapping.
    impl.map = mmap(nullptr, file.size(), PROT_READ, MAP_SHARED, file.fd(), 0);
    if (impl.map == MAP_FAILED) {
        impl.map = nullptr;
        throw ModelError(path + ": mmap failed: " + strerror(errno));
    }
    impl.map_size = file.size();
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

    m->backend_cpu = ggml_backend_cpu_init();
    if (!m->backend_cpu) throw ModelError("ggml_backend_cpu_init failed");
    return m;
}

}  // namespace glm5next
