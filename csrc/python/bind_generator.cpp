// Python bindings of generation with and without draft-MTP speculation: _core.Generator, and _core.Batch (the
// rounds of several generators in shared graphs).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/batch.h"
#include "runtime/speculative.h"

namespace py = pybind11;

using glm5next::Batch;
using glm5next::DraftLengthPolicy;
using glm5next::RoundCostPrior;
using glm5next::Engine;
using glm5next::Generator;
using glm5next::Sequence;

namespace {

using mask_array = py::array_t<uint32_t, py::array::c_style>;

// A token bitmask of `rows` rows (uint32 [rows, mask_words(n_vocab)], or [mask_words] for one row), contiguous, or
// None (nullptr). Any other dtype or shape is a ValueError naming `name`: a cast of an int32 mask would be silent.
const uint32_t * mask_rows(const py::object & obj, int64_t rows, int64_t n_vocab, const char * name,
                           mask_array & keep) {
    if (obj.is_none()) return nullptr;
    const py::array a = py::array::ensure(obj);
    if (!a) throw py::value_error(std::string(name) + ": expected a numpy array");
    if (!a.dtype().is(py::dtype::of<uint32_t>())) {
        throw py::value_error(std::string(name) + ": dtype must be uint32 (view an int32 bitmask with "
                              ".view(np.uint32)), got " + std::string(py::str(a.dtype())));
    }
    const int64_t words = glm5next::mask_words(n_vocab);
    const bool one_row = rows == 1 && a.ndim() == 1 && a.shape(0) == words;
    if (!one_row && !(a.ndim() == 2 && a.shape(0) == rows && a.shape(1) == words)) {
        std::string shape;
        for (py::ssize_t i = 0; i < a.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape(i));
        throw py::value_error(std::string(name) + ": expected shape [" + std::to_string(rows) + ", " +
                              std::to_string(words) + "] (rows, ceil(n_vocab / 32)), got [" + shape + "]");
    }
    keep = mask_array::ensure(a);
    return keep.data();
}

py::dict stats_dict(const glm5next::SpecStats & s) {
    py::dict d;
    d["n_prompt_tokens"] = s.n_prompt;
    d["n_cached_tokens"] = s.n_cached;  // llama-server's timings.cache_n; prompt_n = n_prompt - n_cached
    // where they came from: a context checkpoint (runtime/checkpoints.h), the sequence as it was, or none
    d["cache_source"] = s.n_cached == 0 ? "none" : s.from_checkpoint ? "checkpoint" : "sequence";
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
    d["rounds_at_length"] = s.rounds_at_length;  // rounds allowed k drafts, k = 0..n_max (0: none)
    d["mean_accepted_length"] = s.n_rounds ? double(s.n_accepted + s.n_rounds) / double(s.n_rounds) : 0.0;
    d["pending_rows_max"] = s.pending_rows_max;  // the most draft-head rows (hidden states) held at once
    d["prompt_ms"] = s.prompt_ms;
    d["draft_ms"] = s.draft_ms;
    d["verify_ms"] = s.verify_ms;
    return d;
}

}  // namespace

void bind_generator(py::module_ & mod) {
    py::class_<Generator>(mod, "Generator", R"doc(Generation on a Sequence, optionally with draft-MTP
speculation (docs/runtime.md, draft-MTP round). Greedy output is the same with and without speculation; sampled
output keeps the target distribution (by sampled_accept: llama.cpp's match, which also gives plain decoding's tokens
for a seed, or speculative sampling's rejection).)doc")
        .def(py::init([](Sequence & sequence, int n_max, int n_min, float p_min, int index_share, float synthetic_accepted,
                         bool adaptive, const std::string & sampled_accept, float temperature, int top_k, float top_p,
                         float min_p, uint64_t seed,
                         int n_probs, bool post_sampling_probs,
                         const std::vector<std::pair<int32_t, float>> & logit_bias,
                         std::shared_ptr<DraftLengthPolicy> policy, const std::vector<int32_t> & end_ids) {
                 if (sampled_accept != "match" && sampled_accept != "rejection") {
                     throw std::invalid_argument("sampled_accept '" + sampled_accept + "': expected match or rejection");
                 }
                 const auto accept = sampled_accept == "match" ? glm5next::SampledAccept::match
                                                               : glm5next::SampledAccept::rejection;
                 std::vector<glm5next::LogitBias> bias;
                 for (const auto & [token, b] : logit_bias) bias.push_back({token, b});
                 return new Generator(sequence,
                                      {n_max, n_min, p_min, index_share, synthetic_accepted, adaptive, accept},
                                      {temperature, top_k, top_p, min_p, seed}, n_probs, post_sampling_probs,
                                      std::move(bias),
                                      std::move(policy), end_ids);
             }),
             py::arg("sequence"), py::arg("n_max") = 3, py::arg("n_min") = 0, py::arg("p_min") = 0.0f,
             py::arg("index_share") = -1, py::arg("synthetic_accepted") = -1.0f, py::arg("adaptive") = true,
             py::arg("sampled_accept") = "rejection",
             py::arg("temperature") = 0.8f, py::arg("top_k") = 40, py::arg("top_p") = 0.95f, py::arg("min_p") = 0.05f,
             py::arg("seed") = 0, py::arg("n_probs") = -1, py::arg("post_sampling_probs") = false,
             py::arg("logit_bias") = std::vector<std::pair<int32_t, float>>(), py::arg("policy") = nullptr,
             py::arg("end_ids") = std::vector<int32_t>(), py::keep_alive<1, 2>(),
             "n_max: drafts per round (the most, when adaptive; 0 = no speculation); n_min: shorter drafts are not "
             "verified; p_min: drafting stops below this top probability; index_share: -1 file, 0 off, 1 on; "
             "synthetic_accepted: benchmarks only, a fixed mean number of accepted drafts per round (< 0 = off); "
             "adaptive: each round drafts what DraftLengthPolicy chooses from measured acceptance and timings (0 when "
             "drafting does not pay; greedy output, and sampled output under match, is the same; under rejection a "
             "seeded sample then depends on timing), False: n_max every round; sampled_accept (temperature > 0): "
             "\"match\", drafts are the draft head's argmax, kept while they equal the token the target draws as "
             "plain decoding draws it (llama.cpp's rule: a seed gives plain decoding's tokens), or \"rejection\" (the default), "
             "speculative sampling (d ~ q kept with probability min(1, p/q), else a residual token: more drafts kept, "
             "the same distribution, other tokens). Raises ValueError for speculation without a NextN layer, "
             "n_max >= n_batch, an unknown sampled_accept, or bad sampler settings. n_probs >= 0: "
             "report log-probabilities (probs), with the n_probs most probable tokens'; < 0: none. post_sampling_probs: "
             "those of the distribution the sampler drew from (filters and temperature applied), not the model's. "
             "logit_bias: "
             "[(token id, bias)] added to the logits of every row (a token listed twice gets both; -inf bans it); "
             "ValueError for an id outside the vocabulary, a NaN or +inf bias. policy: the DraftLengthPolicy an adaptive "
             "generator learns in (shared with earlier generators, so that acceptance and timings carry over "
             "requests); None: a new one. ValueError for a policy of another n_max or n_min. end_ids: the "
             "end-of-generation tokens: drafting stops after drafting one (nothing after it is emitted).")
        .def("start",
             [](Generator & g, const std::vector<int32_t> & prompt, bool cache_prompt, const py::object & mask) {
                 mask_array keep;
                 const uint32_t * m = mask_rows(mask, 1, g.n_vocab(), "mask", keep);
                 py::gil_scoped_release release;
                 return g.start(prompt, cache_prompt, m);
             },
             py::arg("prompt"), py::arg("cache_prompt") = false, py::arg("mask") = py::none(),
             "Evaluate `prompt` (list of ids) and return the first sampled token. cache_prompt=False resets the "
             "sequence first; True keeps the longest prefix of the prompt the sequence can resume from (its "
             "current rows or a context checkpoint) and evaluates only the rest (stats n_cached_tokens). Raises "
             "ValueError for an empty prompt, an id outside the vocabulary or a prompt longer than the context. mask: "
             "uint32 [ceil(n_vocab / 32)] bitmask of the tokens the first one may be (token t allowed iff bit t % 32 "
             "of word t / 32 is set), or None.")
        .def("step", &Generator::step, py::arg("max_tokens") = INT64_MAX, py::call_guard<py::gil_scoped_release>(),
             "One round: returns the tokens it emits (accepted drafts, then the target's token), at most max_tokens "
             "(the tokens the caller may still use: drafts are capped so that every one can serve the reply, and "
             "the statistics count only those). Raises ValueError before start() or when the context is full.")
        .def("draft", [](Generator & g, int64_t max_tokens) {
                 py::gil_scoped_release release;
                 return std::vector<int32_t>(g.draft(max_tokens));
             },
             py::arg("max_tokens") = INT64_MAX,
             "The first half of a round, for constrained generation: the drafts step() would verify (none without "
             "speculation), unverified. verify() must follow. Raises ValueError as step(), or when the last drafts "
             "were not verified.")
        .def("begin_draft", &Generator::begin_draft, py::arg("max_tokens") = INT64_MAX,
             py::call_guard<py::gil_scoped_release>(),
             "draft() step by step, for drafts under a grammar: write the pending draft rows and run the draft head's "
             "step 0; returns how many drafts this round may have (0 without speculation). draft_next() drafts them, "
             "verify() must follow. Raises as draft().")
        .def("draft_next", [](Generator & g, const py::object & mask) {
                 mask_array keep;
                 const uint32_t * m = mask_rows(mask, 1, g.n_vocab(), "mask", keep);
                 py::gil_scoped_release release;
                 return g.draft_next(m);
             },
             py::arg("mask") = py::none(),
             "The next draft token, drawn from the draft head's logits with `mask` (uint32 [ceil(n_vocab / 32)], the "
             "tokens the grammar allows after the drafts so far; None: all) applied, or -1 once this round's drafting "
             "stopped (its limit, or below p_min). Raises ValueError without begin_draft() or for a mask of another "
             "dtype or shape.")
        .def("verify", [](Generator & g, int64_t n_keep, const py::object & masks) {
                 mask_array keep;
                 const uint32_t * m = mask_rows(masks, n_keep + 1, g.n_vocab(), "masks", keep);
                 py::gil_scoped_release release;
                 return g.verify(n_keep, m);
             },
             py::arg("n_keep"), py::arg("masks") = py::none(),
             "The second half: verify the first n_keep drafts of the round and return the emitted tokens as "
             "step() does. masks: uint32 [n_keep + 1, ceil(n_vocab / 32)], row i the bitmask of the tokens allowed "
             "after drafts[:i] (the target's disallowed logits become -inf before acceptance and sampling), or None. "
             "Drafts left out must start with one that row n_keep disallows (it counts as rejected: the token comes "
             "from speculative sampling's residual, so sampling stays exact). Raises ValueError without drafts to "
             "verify, for n_keep outside [0, len(drafts)] or masks of another dtype or shape.")
        .def("finish", &Generator::finish, py::call_guard<py::gil_scoped_release>(),
             "End the generation: write the NextN layer's rows still pending for evaluated tokens, so that a later "
             "prompt extending this sequence resumes at its end (start(cache_prompt=True)). Optional.")
        .def_property_readonly("room", &Generator::room, "Tokens the context can still take.")
        .def_property_readonly("prompting", &Generator::prompting,
                               "Whether a prompt started by Batch.start is not done (rows to evaluate, or its first "
                               "token to sample).")
        .def_property_readonly("prompt_left", &Generator::prompt_left,
                               "Rows of that prompt still to evaluate (0 when none or not prompting).")
        .def_property_readonly("prompt_next_rows", &Generator::prompt_next_rows,
                               "Rows of that prompt the next round evaluates: one ubatch (at most n_batch, cut at "
                               "checkpoint_every).")
        .def_property_readonly("probs", [](const Generator & g) {
                py::list out;
                for (const glm5next::TokenProbs & t : g.probs()) {
                    py::list top;
                    for (size_t i = 0; i < t.top_ids.size(); ++i) top.append(py::make_tuple(t.top_ids[i], t.top_logprobs[i]));
                    out.append(py::make_tuple(t.token, t.logprob, top));
                }
                return out;
            },
            "With n_probs >= 0: per token the last start(), step() or verify() returned, (token, logprob, [(id, "
            "logprob) of "
            "the n_probs most probable tokens, most probable first]): natural-log softmax of the raw logits of the "
            "target row that produced it (before the sampler's filters and temperature; csrc/runtime/token_probs.h), "
            "or with post_sampling_probs the log of the distribution the sampler drew it from (its top: the n_probs "
            "most probable of the tokens that survived its filters). Empty with n_probs < 0.")
        .def_property_readonly("drafting", &Generator::drafting,
                               "Whether this generation speculates: False without a NextN layer or drafts, once its "
                               "policy cannot pay or is quiet, or while it rests (its prompt resumed a cache the draft "
                               "head's rows do not cover, or a batch's policy stopped drafting); it then decodes "
                               "as without speculation and writes no draft-head rows.")
        .def_property_readonly("policy", &Generator::policy,
                               "The DraftLengthPolicy this generator reports to and asks (None unless adaptive with "
                               "n_max > 0).")
        .def_property_readonly("stats", [](const Generator & g) { return stats_dict(g.stats()); },
                               "Counters since start(): prompt tokens (and of those resumed from the cache), timings (ms), speculation (n_drafts = rounds "
                               "that carried drafts, n_drafted, n_accepted, acceptance_per_position, drafted_at, "
                               "accepted_at, mean_accepted_length = accepted drafts + 1 per round, rounds_at_length = rounds "
                               "allowed k drafts for k = 0..n_max), pending_rows_max (the most draft-head rows, each a "
                               "hidden state of n_embd floats, held at once on the host).");

    py::class_<Batch>(mod, "Batch", R"doc(One round for several generators, each on its own sequence of one engine, in
shared graphs (csrc/runtime/batch.h): set(generators, max_tokens), then begin(), draft_step(masks) while drafting,
verify(masks); emitted(i). A generator's tokens and drafts are those it gives alone.)doc")
        .def(py::init<Engine &>(), py::arg("engine"), py::keep_alive<1, 2>())
        .def_static("start", [](Generator & g, const std::vector<int32_t> & prompt, bool cache_prompt) {
                        py::gil_scoped_release release;
                        Batch::start(g, prompt, cache_prompt);
                    },
                    py::arg("generator"), py::arg("prompt"), py::arg("cache_prompt") = false,
                    "Start `prompt` on `generator` (cache_prompt as Generator.start) without evaluating it: the rounds "
                    "that include the generator evaluate it, a ubatch per round; the round of its last ubatch emits its "
                    "first token. Raises ValueError for an empty prompt, an id outside the vocabulary or a prompt "
                    "longer than the context.")
        .def("set", [](Batch & b, const std::vector<Generator *> & gens, const std::vector<int64_t> & max_tokens,
                       std::shared_ptr<DraftLengthPolicy> policy) { b.set(gens, max_tokens, std::move(policy)); },
             py::arg("generators"), py::arg("max_tokens"), py::arg("policy") = nullptr, py::keep_alive<1, 2>(),
             "The generators of the next round (each on its own sequence of this engine) and the tokens each one's "
             "caller may still use. policy: the batch's DraftLengthPolicy (None: each generator's own): with two or "
             "more decoding generators whose lengths adapt it chooses one length for all of them from the batch's "
             "costs and their acceptance. Raises ValueError for a generator of another engine, two on one sequence, "
             "or lists of different lengths.")
        .def("begin", &Batch::begin, py::call_guard<py::gil_scoped_release>(),
             "Phase 1: drafts chosen, waiting draft-head rows written and step 0 run, for every generator at once. "
             "Raises ValueError as Generator.begin_draft.")
        .def_property_readonly("drafting", &Batch::drafting, "Whether a generator has a draft to draw (draft_step).")
        .def("draft_step", [](Batch & b, const std::vector<py::object> & masks) {
                 std::vector<mask_array> keep(masks.size());
                 std::vector<const uint32_t *> m(b.size(), nullptr);
                 if (!masks.empty() && masks.size() != b.size()) throw py::value_error("draft_step: one mask per generator");
                 for (size_t i = 0; i < masks.size(); ++i) m[i] = mask_rows(masks[i], 1, b.n_vocab(), "masks", keep[i]);
                 py::gil_scoped_release release;
                 b.draft_step(m);
             },
             py::arg("masks") = std::vector<py::object>(),
             "Phase 2: each generator with a draft to draw draws it under its mask (uint32 [ceil(n_vocab / 32)] or "
             "None; [] for none at all), then the next steps of those that go on run in one graph.")
        .def("verify", [](Batch & b, const std::vector<py::object> & masks) {
                 std::vector<mask_array> keep(masks.size());
                 std::vector<const uint32_t *> m(b.size(), nullptr);
                 if (!masks.empty() && masks.size() != b.size()) throw py::value_error("verify: one mask per generator");
                 for (size_t i = 0; i < masks.size(); ++i) {
                     m[i] = mask_rows(masks[i], b.verify_rows(i), b.n_vocab(), "masks", keep[i]);
                 }
                 py::gil_scoped_release release;
                 b.verify(m);
             },
             py::arg("masks") = std::vector<py::object>(),
             "Phase 3: one trunk graph (prompt ubatches, verify passes), then each generator accepts under its masks "
             "(Generator.verify's masks for a decoding one, the first token's for one whose prompt ends; None) and "
             "commits.")
        .def("drafts", [](const Batch & b, size_t i) { return b.drafts(i); }, py::arg("i"),
             "Generator i's drafts this round so far.")
        .def("emitted", [](const Batch & b, size_t i) { return b.emitted(i); }, py::arg("i"),
             "The tokens generator i emitted in the round (after verify; none while its prompt goes on).")
        .def("error", [](const Batch & b, size_t i) { return b.error(i); }, py::arg("i"),
             "Why generator i's round failed ('' when it did not): a phase of that generator threw (a full context, a "
             "sampler left with no token); its sequence is left whole and the others went on.")
        .def("__len__", &Batch::size);

    py::class_<RoundCostPrior>(mod, "RoundCostPrior", R"doc(What a draft-MTP round costs before a
DraftLengthPolicy timed it, in units of a round without drafts (a one-row verify): measured at load on a scratch
sequence (glm5next_runtime/draft_calibration.py), or the built-in ratios (csrc/runtime/draft_length.h).)doc")
        .def(py::init([](std::vector<double> verify, double first, double next, double row) {
                 RoundCostPrior p{first, next, row, std::move(verify)};
                 p.check();
                 return p;
             }),
             py::arg("verify") = std::vector<double>(), py::arg("first") = RoundCostPrior().first,
             py::arg("next") = RoundCostPrior().next, py::arg("row") = RoundCostPrior().row,
             "verify[r - 1]: a verify pass of r rows (verify[0] == 1; empty: the built-in 1 + 0.25 (r - 1)); first: "
             "draft step 0; next: each later draft step; row: a deferred draft-head row. ValueError, naming the "
             "field, for a ratio that is not finite and > 0 or verify[0] != 1.")
        .def_readonly("verify", &RoundCostPrior::verify, "verify[r - 1]: a verify pass of r rows (empty: built in).")
        .def_readonly("first", &RoundCostPrior::first, "Draft step 0 (with the draft-head rows it writes).")
        .def_readonly("next", &RoundCostPrior::next, "Each later draft step.")
        .def_readonly("row", &RoundCostPrior::row, "A deferred draft-head row.")
        .def("verify_ratio", &RoundCostPrior::verify_ratio, py::arg("rows"),
             "A verify pass of rows rows: verify[rows - 1]; past its end, its last entry plus the slope of its last "
             "two (at least 0; 0.25 with one entry); empty, 1 + 0.25 (rows - 1). ValueError for rows < 1.")
        .def("__repr__", [](const RoundCostPrior & p) {
            std::string v;
            for (double x : p.verify) v += (v.empty() ? "" : ", ") + std::to_string(x);
            return "RoundCostPrior(verify=[" + v + "], first=" + std::to_string(p.first) + ", next=" +
                   std::to_string(p.next) + ", row=" + std::to_string(p.row) + ")";
        });

    py::class_<DraftLengthPolicy, std::shared_ptr<DraftLengthPolicy>>(mod, "DraftLengthPolicy", R"doc(The number of drafts a draft-MTP round should carry:
the k that maximizes expected emitted tokens per ms from the round outcomes and timings it is told
(csrc/runtime/draft_length.h). An adaptive Generator reports to one and asks it (Model keeps one per n_max and
n_min, shared by its generators).)doc")
        .def(py::init<int, int, RoundCostPrior>(), py::arg("n_max"), py::arg("n_min") = 0,
             py::arg("prior") = RoundCostPrior(),
             "n_max: the most drafts (ValueError when < 0); n_min: a positive choice is at least this; prior: the "
             "round costs assumed until timed (Model.draft_calibration's, measured at load).")
        .def_property_readonly("prior", &DraftLengthPolicy::prior, "The RoundCostPrior it was made with.")
        .def_static("clipped_mean", [](const std::vector<double> & samples) {
                        return glm5next::clipped_mean(samples.data(), samples.size());
                    }, py::arg("samples"),
                    "The policy's estimate of a cost from its latest timings (ms): their mean, each clipped at twice "
                    "their median. ValueError for no samples or more than the policy's window of 9.")
        .def("choose", &DraftLengthPolicy::choose, py::arg("limit"),
             "The next round's drafts in {0} + [max(1, n_min), min(limit, n_max)]; a one-draft probe every "
             "probe_interval rounds while the best is 0.")
        .def("observe", &DraftLengthPolicy::observe, py::arg("n_drafted"), py::arg("n_accepted"),
             py::arg("verify_rows"), py::arg("pending_rows"), py::arg("first_ms"), py::arg("next_ms"),
             py::arg("verify_ms"), py::arg("between_ms") = -1.0, py::arg("n_chosen") = -1,
             "A round's outcome: drafts, accepted drafts (a prefix), rows verified, draft-head rows step 0 wrote, "
             "step 0 ms, later steps' ms, verify ms, the caller's ms since the last round (< 0: unknown), the drafts "
             "choose allowed (< 0: as drafted; one not produced after accepted ones counts as rejected).")
        .def("observe_rows", &DraftLengthPolicy::observe_rows, py::arg("n_rows"), py::arg("ms"),
             "Deferred draft-head rows written without drafting: n_rows of them in ms.")
        .def("acceptance", &DraftLengthPolicy::acceptance, py::arg("j"),
             "Estimated acceptance of draft j (1-based) given drafts 1..j-1 were accepted.")
        .def("can_pay", &DraftLengthPolicy::can_pay,
             "False once measured costs said no acceptance could make drafting pay (adaptive Generators on this "
             "policy then decode as without speculation, until reconsider): the last 9 probe-length rounds, each "
             "against the rounds without drafts before it, would gain under 5% even fully accepted. True before.")
        .def("observe_dormant", &DraftLengthPolicy::observe_dormant,
             "A round without drafts because drafting cannot pay (counted for reconsider).")
        .def("reconsider", &DraftLengthPolicy::reconsider,
             "At a request's start: after RECONSIDER_AFTER dormant rounds, can_pay is judged anew from "
             "fresh probes. Returns whether it was.")
        .def("quiet", &DraftLengthPolicy::quiet,
             "True once a probe was rejected where even an accepted next probe would not make drafting pay: the "
             "generations on this policy then run without drafts and write no draft-head rows, until wake.")
        .def("wake", &DraftLengthPolicy::wake,
             "At a generation's start (a new text): no longer quiet, the next probe within 8 rounds, if a "
             "predictable text could pay (predictable_text_pays) or this is the 64th new text that found it quiet "
             "since it last woke. Returns whether it woke.")
        .def("predictable_text_pays", &DraftLengthPolicy::predictable_text_pays,
             "Whether drafting would pay, at the round costs estimated now, on a text whose every draft is accepted "
             "with probability 0.8 (a text the draft head predicts well).")
        .def("expected_tokens", &DraftLengthPolicy::expected_tokens, py::arg("k"),
             "Expected tokens a round with k drafts emits.")
        .def("expected_cost", &DraftLengthPolicy::expected_cost, py::arg("k"),
             "Expected ms of a round with k drafts (in one-row verifies before any timing was told).")
        .def_property_readonly("probe_interval", &DraftLengthPolicy::probe_interval,
                               "Rounds without drafts between probes (doubles while drafting does not pay).")
        .def_property_readonly("n_max", &DraftLengthPolicy::n_max, "The most drafts a round may carry.")
        .def_property_readonly("n_min", &DraftLengthPolicy::n_min, "The fewest drafts a positive choice carries.");
    mod.attr("DraftLengthPolicy").attr("RECONSIDER_AFTER") = DraftLengthPolicy::kReconsiderAfter;
}
