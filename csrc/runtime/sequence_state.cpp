#include "runtime/sequence_state.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace glm5next {

namespace {

constexpr char kMagic[8] = {'G', 'L', 'M', '5', 'N', 'S', 'E', 'Q'};
constexpr uint32_t kVersion = 3;  // 2: a checkpoint's logits; 3: cache rows in the cache's type (-ctk)

class Writer {
public:
    std::vector<uint8_t> bytes;

    template <class T> void put(T v) { append(&v, sizeof v); }
    void floats(const std::vector<float> & v) {
        put<uint64_t>(v.size());
        append(v.data(), v.size() * sizeof(float));
    }
    void rows(const CacheRows & r) {
        put<uint32_t>(r.n_past);
        put<uint32_t>((uint32_t) r.tensors.size());
        for (const auto & t : r.tensors) {
            put<uint32_t>((uint32_t) t.type);
            put<uint64_t>(t.data.size());
            append(t.data.data(), t.data.size());
        }
    }
    void append(const void * p, size_t n) {
        const auto * b = static_cast<const uint8_t *>(p);
        bytes.insert(bytes.end(), b, b + n);
    }
};

class Reader {
public:
    Reader(const uint8_t * data, size_t size) : data_(data), size_(size) {}

    template <class T> T get(const char * what) {
        T v;
        std::memcpy(&v, take(sizeof v, what), sizeof v);
        return v;
    }
    std::vector<float> floats(const char * what) {
        const uint64_t n = get<uint64_t>(what);
        if (n > (size_ - at_) / sizeof(float)) fail(what, "its length " + std::to_string(n) + " runs past the end");
        std::vector<float> v(n);
        std::memcpy(v.data(), take(n * sizeof(float), what), n * sizeof(float));
        return v;
    }
    CacheRows rows(const char * what) {
        CacheRows r;
        r.n_past = get<uint32_t>(what);
        const uint32_t n = get<uint32_t>(what);
        if (n > (size_ - at_) / sizeof(uint64_t)) fail(what, std::to_string(n) + " tensors cannot fit the rest");
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t type = get<uint32_t>(what);
            if (type >= GGML_TYPE_COUNT) fail(what, "cache tensor " + std::to_string(i) + " has no ggml type " + std::to_string(type));
            const uint64_t size = get<uint64_t>(what);
            if (size > size_ - at_) fail(what, "its length " + std::to_string(size) + " runs past the end");
            const uint8_t * p = take(size, what);
            r.tensors.push_back({(ggml_type) type, std::vector<uint8_t>(p, p + size)});
        }
        return r;
    }
    const uint8_t * take(size_t n, const char * what) {
        if (n > size_ - at_) fail(what, "the data ends first");
        const uint8_t * p = data_ + at_;
        at_ += n;
        return p;
    }
    size_t at() const { return at_; }
    bool done() const { return at_ == size_; }
    [[noreturn]] void fail(const char * what, const std::string & why) const {
        throw std::invalid_argument("not a saved glm5next sequence, or a damaged one: " + std::string(what) +
                                    " at byte " + std::to_string(at_) + ": " + why);
    }

private:
    const uint8_t * data_;
    size_t size_;
    size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> serialize(const SequenceState & s) {
    Writer w;
    w.append(kMagic, sizeof kMagic);
    w.put<uint32_t>(kVersion);
    w.put<uint32_t>((uint32_t) s.tokens.size());
    w.append(s.tokens.data(), s.tokens.size() * sizeof(int32_t));
    w.rows(s.trunk);
    w.put<uint8_t>(s.has_draft ? 1 : 0);
    if (s.has_draft) w.rows(s.draft);
    w.floats(s.last_hidden);
    w.put<int64_t>(s.draft_from_trunk);
    w.put<uint32_t>((uint32_t) s.checkpoints.size());
    for (const Checkpoint & c : s.checkpoints) {
        w.put<uint32_t>(c.trunk.n_past);
        w.floats(c.trunk.kda);
        w.floats(c.hidden);
        w.floats(c.logits);
    }
    return std::move(w.bytes);
}

SequenceState deserialize(const uint8_t * data, size_t size) {
    Reader r(data, size);
    if (std::memcmp(r.take(sizeof kMagic, "the magic"), kMagic, sizeof kMagic) != 0) {
        throw std::invalid_argument("not a saved glm5next sequence (it does not start with GLM5NSEQ)");
    }
    const uint32_t version = r.get<uint32_t>("the version");
    if (version != kVersion) {
        throw std::invalid_argument("a saved sequence of format version " + std::to_string(version) +
                                    "; this build reads version " + std::to_string(kVersion));
    }
    SequenceState s;
    const uint32_t n_tokens = r.get<uint32_t>("the token count");
    const uint8_t * tokens = r.take((size_t) n_tokens * sizeof(int32_t), "the tokens");
    s.tokens.resize(n_tokens);
    std::memcpy(s.tokens.data(), tokens, (size_t) n_tokens * sizeof(int32_t));
    s.trunk = r.rows("the trunk's cache rows");
    const uint8_t has_draft = r.get<uint8_t>("the NextN flag");
    if (has_draft > 1) r.fail("the NextN flag", "neither 0 nor 1");
    s.has_draft = has_draft == 1;
    if (s.has_draft) s.draft = r.rows("the NextN layer's cache rows");
    s.last_hidden = r.floats("the last hidden state");
    s.draft_from_trunk = r.get<int64_t>("the draft rows' origin");
    const uint32_t n_checkpoints = r.get<uint32_t>("the checkpoint count");
    for (uint32_t i = 0; i < n_checkpoints; ++i) {
        Checkpoint c;
        c.trunk.n_past = r.get<uint32_t>("a checkpoint's row");
        c.trunk.kda = r.floats("a checkpoint's recurrent state");
        c.hidden = r.floats("a checkpoint's hidden state");
        c.logits = r.floats("a checkpoint's logits");
        s.checkpoints.push_back(std::move(c));
    }
    if (!r.done()) r.fail("the end", std::to_string(size - r.at()) + " bytes follow the last checkpoint");
    return s;
}

}  // namespace glm5next
