#include "model/draft_weights.h"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-cpu.h"

namespace glm5next {

namespace {

enum class Rule { keep, floor_q8, quantize };

// The draft layer's large weights and how each may be requantized.
std::vector<std::pair<ggml_tensor * LayerWeights::*, Rule>> requantizable() {
    return {
        {&LayerWeights::wq_a, Rule::floor_q8},      {&LayerWeights::wq_b, Rule::floor_q8},
        {&LayerWeights::eh_proj, Rule::floor_q8},   {&LayerWeights::wo, Rule::quantize},
        {&LayerWeights::gate_exps, Rule::quantize}, {&LayerWeights::up_exps, Rule::quantize},
        {&LayerWeights::down_exps, Rule::quantize}, {&LayerWeights::gate_shexp, Rule::quantize},
        {&LayerWeights::up_shexp, Rule::quantize},  {&LayerWeights::down_shexp, Rule::quantize},
    };
}

// Rows of `src` as float, `row0`..`row0 + n` (any stored type ggml can convert; any device: read through ggml).
void rows_to_float(const ggml_tensor * src, int64_t row0, int64_t n, std::vector<uint8_t> & raw, float * out) {
    const int64_t n_per_row = src->ne[0];
    raw.resize(n * src->nb[1]);
    ggml_backend_tensor_get(src, raw.data(), row0 * src->nb[1], n * src->nb[1]);
    const auto * traits = ggml_get_type_traits(src->type);
    for (int64_t r = 0; r < n; ++r) {
        const uint8_t * row = raw.data() + r * src->nb[1];
        if (src->type == GGML_TYPE_F32) {
            std::copy((const float *) row, (const float *) row + n_per_row, out + r * n_per_row);
        } else {
            traits->to_float(row, out + r * n_per_row, n_per_row);
        }
    }
}

}  // namespace

ggml_type draft_type_from_name(const std::string & name) {
    if (name.empty() || name == "auto") return GGML_TYPE_COUNT;
    if (name == "q8_0") return GGML_TYPE_Q8_0;
    if (name == "q4_0") return GGML_TYPE_Q4_0;
    throw std::invalid_argument("spec draft type '" + name + "': expected auto, q8_0 or q4_0");
}

DraftWeights::DraftWeights(const Model & model, ggml_type type) {
    const HParams & hp = model.hp;
    if (hp.n_nextn == 0) {
        throw std::invalid_argument(model.path + ": no NextN layer to draft with");
    }
    w_ = model.layers[hp.n_trunk()];
    if (type == GGML_TYPE_COUNT) return;
    if (type != GGML_TYPE_Q8_0 && type != GGML_TYPE_Q4_0) {
        throw std::invalid_argument("the draft layer can be requantized to q8_0 or q4_0 only");
    }
    // Plan the new tensors first (contiguous, same shapes), then fill them row by row.
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> todo;  // (source, requantized)
    ctx_ = ggml_init({ggml_tensor_overhead() * 16, nullptr, true});
    for (const auto & [field, rule] : requantizable()) {
        ggml_tensor * src = w_.*field;
        if (src == nullptr || rule == Rule::keep) continue;
        const ggml_type want = rule == Rule::floor_q8 ? GGML_TYPE_Q8_0 : type;
        if (src->type == want || src->ne[0] % ggml_blck_size(want) != 0) continue;  // no whole blocks: keep
        ggml_tensor * dst = ggml_new_tensor(ctx_, want, ggml_n_dims(src), src->ne);
        ggml_set_name(dst, src->name);
        todo.emplace_back(src, dst);
        requantized_[src->name] = want;
        w_.*field = dst;
    }
    if (todo.empty()) return;
    // On the device of the layer's weights (the first requantized one's, when -ot splits the layer).
    buf_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, ggml_backend_dev_buffer_type(device_of(todo[0].first)));
    if (buf_ == nullptr) {
        throw std::runtime_error("cannot allocate the requantized draft layer");
    }
    // weights, as the file's (model.cpp): ggml's scheduler runs an op on the device of a weights buffer it reads
    ggml_backend_buffer_set_usage(buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    std::vector<uint8_t> raw, quantized;
    for (const auto & [src, dst] : todo) {
        const int64_t n_per_row = src->ne[0], n_rows = ggml_nrows(src);
        const int64_t chunk = std::max<int64_t>(1, (1 << 20) / n_per_row);  // ~4 MB of floats at a time
        std::vector<float> rows(chunk * n_per_row);
        for (int64_t r = 0; r < n_rows; r += chunk) {
            const int64_t n = std::min(chunk, n_rows - r);
            rows_to_float(src, r, n, raw, rows.data());
            quantized.resize(n * dst->nb[1]);
            ggml_quantize_chunk(dst->type, rows.data(), quantized.data(), 0, n, n_per_row, nullptr);
            ggml_backend_tensor_set(dst, quantized.data(), r * dst->nb[1], n * dst->nb[1]);
        }
    }
}

DraftWeights::~DraftWeights() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

}  // namespace glm5next
