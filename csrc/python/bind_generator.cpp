// Python bindings of generation with and without draft-MTP speculation: _core.Generator.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "runtime/speculative.h"

namespace py = pybind11;

using glm5next::Engine;
using glm5next::Generator;

namespace {

py::dict stats_dict(const glm5next::SpecStats & s) {
    py::dict d;
    d["n_prompt_tokens"] = s.n_prompt;
    d["n_cached_tokens"] = s.n_cached;  // llama-server's timings.cache_n; prompt_n = n_prompt - n_cached
    d["n_drafts"] = s.n_rounds;
    d["n_drafted"] = s.n_drafted;
    d["n_accepted"] = s.n_accepted;
    py::list per_pos;
    for (size_t i = 0; i < s.drafted_at.size(); ++i) {
        per_pos.append(s.drafted_at[i] ? double(s.accepted_at[i]) / double(s.drafted_at[i]) : 0.0);
    }
    d["acceptance_per_position"] = per_pos;
    d["drafted_at"] = s.drafted_at;    // rounds that drafted position i
    d["accepted_at"] = s.accepted_at;  // rounds that accepted position i
    d["mean_accepted_length"] = s.n_rounds ? double(s.n_accepted + s.n_rounds) / double(s.n_rounds) : 0.0;
    d["prompt_ms"] = s.prompt_ms;
    d["draft_ms"] = s.draft_ms;
    d["verify_ms"] = s.verify_ms;
    return d;
}

}  // namespace

void bind_generator(py::module_ & mod) {
    py::class_<Generator>(mod, "Generator", R"doc(Generation on an Engine's sequence, optionally with draft-MTP
speculation (runtime.md, draft-MTP round). Greedy output is the same with and without speculation; sampled
output keeps the target distribution (speculative sampling).)doc")
        .def(py::init([](Engine & engine, int n_max, int n_min, float p_min, int index_share, float synthetic_accepted,
                         float temperature, int top_k, float top_p, float min_p, uint64_t seed) {
                 return new Generator(engine, {n_max, n_min, p_min, index_share, synthetic_accepted},
                                      {temperature, top_k, top_p, min_p, seed});
             }),
             py::arg("engine"), py::arg("n_max") = 3, py::arg("n_min") = 0, py::arg("p_min") = 0.0f,
             py::arg("index_share") = -1, py::arg("synthetic_accepted") = -1.0f, py::arg("temperature") = 0.8f,
             py::arg("top_k") = 40, py::arg("top_p") = 0.95f, py::arg("min_p") = 0.05f, py::arg("seed") = 0,
             py::keep_alive<1, 2>(),
             "n_max: drafts per round (0 = no speculation); n_min: shorter drafts are not verified; p_min: drafting "
             "stops below this top probability; index_share: -1 file, 0 off, 1 on; synthetic_accepted: benchmarks "
             "only, a fixed mean number of accepted drafts per round (< 0 = off). Raises ValueError for speculation "
             "without a NextN layer, n_max >= n_batch, or bad sampler settings.")
        .def("start", &Generator::start, py::arg("prompt"), py::arg("cache_prompt") = false,
             py::call_guard<py::gil_scoped_release>(),
             "Evaluate `prompt` (list of ids) and return the first sampled token. cache_prompt=False resets the "
             "sequence first; True keeps the longest prefix of the prompt the sequence can resume from (its "
             "current rows or a context checkpoint) and evaluates only the rest (stats n_cached_tokens). Raises "
             "ValueError for an empty prompt, an id outside the vocabulary or a prompt longer than the context.")
        .def("step", &Generator::step, py::arg("max_tokens") = INT64_MAX, py::call_guard<py::gil_scoped_release>(),
             "One round: returns the tokens it emits (accepted drafts, then the target's token), at most max_tokens "
             "(the tokens the caller may still use: drafts are capped so that every one can serve the reply, and "
             "the statistics count only those). Raises ValueError before start() or when the context is full.")
        .def("finish", &Generator::finish, py::call_guard<py::gil_scoped_release>(),
             "End the generation: write the NextN layer's rows still pending for evaluated tokens, so that a later "
             "prompt extending this sequence resumes at its end (start(cache_prompt=True)). Optional.")
        .def_property_readonly("room", &Generator::room, "Tokens the context can still take.")
        .def_property_readonly("stats", [](const Generator & g) { return stats_dict(g.stats()); },
                               "Counters since start(): prompt tokens (and of those resumed from the cache), timings (ms), speculation (n_drafts = rounds "
                               "that carried drafts, n_drafted, n_accepted, acceptance_per_position, drafted_at, "
                               "accepted_at, mean_accepted_length = accepted drafts + 1 per round).");
}
