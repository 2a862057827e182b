// Python bindings of the sampler: _core.Sampler.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/sampling.h"

namespace py = pybind11;

namespace glm5next {

namespace {

using f32_vector = py::array_t<float, py::array::c_style>;

// A non-empty 1-D float32 numpy array (a strided view is copied to contiguous). Any other dtype is a ValueError
// rather than a cast: float64 logits mean the caller built them elsewhere, and a silent cast would hide that.
f32_vector as_f32_vector(const py::handle & obj, const char * name) {
    const py::array a = py::array::ensure(obj);
    if (!a) throw py::value_error(std::string(name) + ": expected a numpy array");
    if (!a.dtype().is(py::dtype::of<float>())) {
        throw py::value_error(std::string(name) + ": dtype must be float32, got " + std::string(py::str(a.dtype())));
    }
    if (a.ndim() != 1 || a.size() < 1) {
        throw py::value_error(std::string(name) + ": expected a non-empty 1-D array, got shape of ndim " +
                              std::to_string(a.ndim()) + " and size " + std::to_string(a.size()));
    }
    return f32_vector::ensure(a);
}

std::vector<float> to_vector(const py::handle & obj, const char * name) {
    const f32_vector a = as_f32_vector(obj, name);
    return std::vector<float>(a.data(), a.data() + a.size());
}

// p and q of one draft position, checked for one size here so the message names both arrays.
std::pair<std::vector<float>, std::vector<float>> to_pair(const py::handle & p, const py::handle & q) {
    std::vector<float> pv = to_vector(p, "p"), qv = to_vector(q, "q");
    if (pv.size() != qv.size()) {
        throw py::value_error("p has " + std::to_string(pv.size()) + " entries but q has " + std::to_string(qv.size()));
    }
    return {std::move(pv), std::move(qv)};
}

// None draws a seed from the OS (then readable back as Sampler.seed, so a run can be reproduced).
uint64_t seed_of(const py::object & seed) {
    if (seed.is_none()) return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    if (!py::isinstance<py::int_>(seed) || seed < py::int_(0) || seed.attr("bit_length")().cast<int>() > 64) {
        throw py::value_error("seed = " + std::string(py::repr(seed)) + ": must be an int in [0, 2**64) or None");
    }
    return seed.cast<uint64_t>();
}

}  // namespace

}  // namespace glm5next

using glm5next::Sampler;
using glm5next::SamplerParams;

void bind_sampling(py::module_ & mod) {
    py::class_<Sampler>(mod, "Sampler", R"doc(Token sampler of one sequence (it owns the RNG: one seed fixes a generation).

Temperature <= 0 is greedy (argmax, ties to the lowest id). Otherwise the filters run in this order on
softmax(logits / temperature), each on the survivors of the previous one renormalized: top_k (0 = off),
top_p (1 = off), min_p (0 = off, relative to the most probable token); then renormalize and draw.)doc")
        .def(py::init([](float temperature, int32_t top_k, float top_p, float min_p, const py::object & seed) {
                 return new Sampler(SamplerParams{temperature, top_k, top_p, min_p, glm5next::seed_of(seed)});
             }),
             py::arg("temperature") = 0.8f, py::arg("top_k") = 40, py::arg("top_p") = 0.95f, py::arg("min_p") = 0.05f,
             py::arg("seed") = py::none(),
             "Sampler(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=None (random)).\n"
             "Raises ValueError for top_k < 0, top_p outside (0, 1], min_p outside [0, 1], a NaN temperature or a\n"
             "seed outside [0, 2**64).")
        .def(
            "sample",
            [](Sampler & s, const py::handle & logits) {
                const auto a = glm5next::as_f32_vector(logits, "logits");
                return s.sample(a.data(), a.size());
            },
            py::arg("logits"),
            "A token id drawn from distribution(logits). logits: float32 [n_vocab].\n"
            "Raises ValueError for another dtype or shape, a NaN logit or a maximum that is not finite.")
        .def(
            "distribution",
            [](Sampler & s, const py::handle & logits) {
                const auto a = glm5next::as_f32_vector(logits, "logits");
                auto * p = new std::vector<float>();
                py::capsule owner(p, [](void * v) { delete static_cast<std::vector<float> *>(v); });
                s.distribution(a.data(), a.size(), *p);
                return py::array_t<float>(py::ssize_t(p->size()), p->data(), owner);
            },
            py::arg("logits"),
            "float32 [n_vocab]: the filtered, normalized distribution sample() draws from (0 for filtered-out\n"
            "tokens; one-hot at the argmax when greedy). Raises as sample().")
        .def(
            "sample_from",
            [](Sampler & s, const py::handle & p) { return s.sample_from(glm5next::to_vector(p, "p")); },
            py::arg("p"),
            "A token id drawn from p (float32 [n_vocab], non-negative, positive sum; need not be normalized) with\n"
            "this sampler's RNG. Raises ValueError for another dtype or shape or no positive entry.")
        .def(
            "accept_draft",
            [](Sampler & s, const py::handle & p, const py::handle & q, int32_t token) {
                const auto [pv, qv] = glm5next::to_pair(p, q);
                return s.accept_draft(pv, qv, token);
            },
            py::arg("p"), py::arg("q"), py::arg("token"),
            "Speculative sampling: accept draft `token` (drawn from q) with probability min(1, p[token] / q[token]).\n"
            "On rejection take sample_residual(p, q); the emitted tokens are then distributed exactly as p.\n"
            "p, q: float32 [n_vocab] (target and draft distributions). Raises ValueError for another dtype or\n"
            "shape, sizes that differ, or a token outside [0, n_vocab).")
        .def(
            "sample_residual",
            [](Sampler & s, const py::handle & p, const py::handle & q) {
                const auto [pv, qv] = glm5next::to_pair(p, q);
                return s.sample_residual(pv, qv);
            },
            py::arg("p"), py::arg("q"),
            "A token id from norm(max(p - q, 0)), or from p where that is all zero. Raises as accept_draft.")
        .def_property_readonly("temperature", [](const Sampler & s) { return s.params().temperature; })
        .def_property_readonly("top_k", [](const Sampler & s) { return s.params().top_k; })
        .def_property_readonly("top_p", [](const Sampler & s) { return s.params().top_p; })
        .def_property_readonly("min_p", [](const Sampler & s) { return s.params().min_p; })
        .def_property_readonly("seed", [](const Sampler & s) { return s.params().seed; },
                               "The seed in use (the drawn one when constructed with seed=None).");
}
