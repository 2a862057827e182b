// Python bindings of the engine: _core.Engine (what sequences share), _core.Seq (trunk, verify/commit, draft-head rows
// of one sequence: csrc/runtime/sequence.h) and _core.DraftChain.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "graph/select_ops.h"
#include "model/draft_weights.h"
#include "runtime/draft_chain.h"
#include "runtime/engine.h"
#include "runtime/sequence.h"

namespace py = pybind11;

namespace glm5next {

namespace {

py::array_t<float> to_array(std::vector<float> && v, int64_t rows, int64_t cols) {
    auto * heap = new std::vector<float>(std::move(v));
    py::capsule owner(heap, [](void * p) { delete static_cast<std::vector<float> *>(p); });
    return py::array_t<float>({rows, cols}, heap->data(), owner);
}

py::dict eval(Sequence & e, const std::vector<int32_t> & tokens, bool logits_all) {
    EvalOutput out;
    {
        py::gil_scoped_release release;
        out = e.eval(tokens, logits_all);
    }
    const int64_t k = out.pools.empty() ? 0 : (int64_t) out.pools[0].size() / out.n_tokens;
    py::dict pools;
    for (size_t i = 0; i < out.dsa_layers.size(); ++i) {
        py::array_t<int32_t> a({out.n_tokens, k});
        std::copy(out.pools[i].begin(), out.pools[i].end(), a.mutable_data());
        pools[py::int_(out.dsa_layers[i])] = a;
    }
    py::dict d;
    d["logits"] = to_array(std::move(out.logits), out.n_logit_rows, e.engine().n_vocab());
    d["hidden"] = to_array(std::move(out.hidden), out.n_tokens, e.engine().n_embd());
    d["pools"] = pools;
    return d;
}

py::dict verify(Sequence & e, const std::vector<int32_t> & tokens) {
    EvalOutput out;
    {
        py::gil_scoped_release release;
        e.verify(tokens, out);
    }
    py::dict d;
    d["logits"] = to_array(std::move(out.logits), out.n_logit_rows, e.engine().n_vocab());
    d["hidden"] = to_array(std::move(out.hidden), out.n_tokens, e.engine().n_embd());
    return d;
}

// Copies of a KDA layer's caches: "conv" float32 [3*inner, K-1] (q|k|v pre-conv window), "state" [n_head, d, d].
py::dict kda_state(const Sequence & e, uint32_t il) {
    const LayerCache & c = e.cache().layer(il);
    if (c.state == nullptr) throw std::invalid_argument("layer " + std::to_string(il) + " is not a KDA layer");
    py::array_t<float> conv({c.conv->ne[1], c.conv->ne[0]});
    py::array_t<float> state({c.state->ne[2], c.state->ne[1], c.state->ne[0]});
    float * conv_out = conv.mutable_data(), * state_out = state.mutable_data();
    {
        py::gil_scoped_release release;
        std::lock_guard<std::recursive_mutex> lock(e.engine().mutex());  // (the scheduler may be running graphs)
        ggml_backend_tensor_get(c.conv, conv_out, 0, ggml_nbytes(c.conv));
        ggml_backend_tensor_get(c.state, state_out, 0, ggml_nbytes(c.state));
    }
    py::dict d;
    d["conv"] = conv;
    d["state"] = state;
    return d;
}

py::dict draft_output(const DraftOutput & out) {
    py::dict d;
    d["logits"] = py::array_t<float>((py::ssize_t) out.logits.size(), out.logits.data());
    d["z"] = py::array_t<float>((py::ssize_t) out.z.size(), out.z.data());
    d["pools"] = py::array_t<int32_t>((py::ssize_t) out.pools.size(), out.pools.data());
    return d;
}

using f32_rows = py::array_t<float, py::array::c_style | py::array::forcecast>;

void check_rows(const Sequence & e, const f32_rows & hidden, int64_t n) {
    if (hidden.ndim() != 2 || hidden.shape(0) != n || hidden.shape(1) != e.engine().n_embd()) {
        throw std::invalid_argument("hidden must be float32 [len(next_tokens), n_embd]");
    }
}

py::dict draft_rows(Sequence & e, const f32_rows & hidden, const std::vector<int32_t> & next_tokens, int64_t pos0,
                    const std::optional<std::vector<int32_t>> & saved_pools, int64_t saved_p0) {
    const int64_t n = (int64_t) next_tokens.size();
    check_rows(e, hidden, n);
    if (saved_pools && (int64_t) saved_pools->size() != e.engine().n_top_pool()) {
        throw std::invalid_argument("draft_rows: saved_pools must hold index_topk / kpool entries");
    }
    DraftOutput out;
    {
        py::gil_scoped_release release;
        // rows given from Python may be anything: a later resume() does not count on them
        e.draft_rows(hidden.data(), next_tokens.data(), n, pos0, saved_pools ? saved_pools->data() : nullptr, saved_p0,
                     /*from_trunk=*/false, out);
    }
    return draft_output(out);
}

// A DraftChain with the sequence it drafts on (kept alive by keep_alive in the binding).
struct PyDraftChain {
    Sequence & seq;
    DraftChain chain;
    PyDraftChain(Sequence & s, bool share) : seq(s), chain(s, share) {}

    py::dict begin(const f32_rows & hidden, const std::vector<int32_t> & next_tokens, int64_t pos0) {
        const int64_t n = (int64_t) next_tokens.size();
        check_rows(seq, hidden, n);
        py::gil_scoped_release release;
        const DraftOutput & out = chain.begin(hidden.data(), next_tokens.data(), n, pos0);
        py::gil_scoped_acquire acquire;
        return draft_output(out);
    }

    py::dict next(int32_t drafted) {
        py::gil_scoped_release release;
        const DraftOutput & out = chain.next(drafted);
        py::gil_scoped_acquire acquire;
        return draft_output(out);
    }
};

}  // namespace

}  // namespace glm5next

using glm5next::Engine;
using glm5next::EngineParams;
using glm5next::Model;
using glm5next::Sequence;
using glm5next::SequenceParams;

void bind_engine(py::module_ & mod) {
    mod.def("selected_rows", [](const std::vector<int32_t> & pools, int64_t pos, int64_t kpool, bool select_tail) {
                if (pos < 0 || kpool < 1) throw std::invalid_argument("selected_rows: pos >= 0 and kpool >= 1");
                const glm5next::KpoolParams p{pos, kpool, (int64_t) pools.size(), select_tail};
                std::vector<int32_t> rows(pools.size() * kpool + kpool - 1);
                rows.resize(glm5next::selected_rows(p, pools.data(), (int64_t) pools.size(), 0, rows.data()));
                return rows;
            },
            py::arg("pools"), py::arg("pos"), py::arg("kpool"), py::arg("select_tail"),
            "The key positions a row at `pos` attends, ascending, given its chosen pools (list of ids, -1 = none): "
            "the graph's own rule (csrc/graph/select_ops.h). Raises ValueError for pos < 0 or kpool < 1.");
    py::class_<Engine>(mod, "Engine", R"doc(What the sequences of one loaded model share: the weights, the devices, the
graphs kept for reuse and one CPU thread pool (csrc/runtime/engine.h). Sequences (_core.Seq) are made on it;
their rows run in its graphs, one sequence's alone or several sequences' together (_core.Batch).)doc")
        .def(py::init([](const Model & model, uint32_t n_batch, int n_threads, const std::string & draft_type,
                         const Model * draft_model, uint32_t n_verify_rows, uint32_t n_seq_max) {
                 return new Engine(model,
                                   EngineParams{n_batch, n_threads, glm5next::draft_type_from_name(draft_type),
                                                n_verify_rows, n_seq_max},
                                   draft_model);
             }),
             py::arg("model"), py::arg("n_batch") = 512, py::arg("n_threads") = 0, py::arg("draft_type") = "auto",
             py::arg("draft_model") = nullptr, py::arg("n_verify_rows") = 4, py::arg("n_seq_max") = 1,
             py::keep_alive<1, 2>(),
             py::keep_alive<1, 6>(),
             "Engine(model: _core.Model, n_batch: int (rows per ubatch of a sequence), n_threads: int = 0 (all cores), "
             "draft_type: str = 'auto' (the draft layer as stored) | 'q8_0' | 'q4_0' (requantized at load, once for "
             "every sequence), draft_model: _core.Model | None (a separate --mtp-only file with the NextN layer), "
             "n_verify_rows: the rows of verify passes and draft steps the compute buffers are sized for at load (draft "
             "n_max + 1; longer ones grow them on first use), n_seq_max: the sequences whose caches (trunk and NextN "
             "layer) are cells of the engine's (llama.cpp's n_seq_max, the server's -np; csrc/runtime/cache_cells.h): their rows in one "
             "step write their caches and run KDA per layer at once; more sequences may be made, whose rows run per "
             "sequence).\n"
             "Raises ValueError for a draft-only file as model, n_batch or n_seq_max of 0, a bad draft_type, or a draft "
             "file that does not fit the model; RuntimeError when a device cannot hold the cells.")
        .def_property_readonly("has_draft_head", &Engine::has_draft_head)
        .def("memory", [](const Engine & e) {
                py::list out;
                for (const glm5next::DeviceMemory & m : e.memory()) {
                    py::dict row;
                    row["device"] = m.device;
                    row["weights"] = m.weights;
                    row["caches"] = m.caches;
                    row["compute"] = m.compute;
                    out.append(row);
                }
                return out;
            },
            "memory() -> list of dict(device, weights, caches, compute) in bytes, one per device that holds any, the "
            "CPU last: llama.cpp's load report. caches: every sequence's on the engine and the cache cells no sequence "
            "has taken (n_seq_max); compute: the schedulers' "
            "buffers (sized at load for a full ubatch at the end of the first sequence's context, grown by the graphs "
            "run since), once for all sequences.")
        .def_property_readonly("cpu_pinned_ops", &Engine::cpu_pinned_ops,
                               "list[str]: the ops that run on the CPU although their layer is placed on a device, "
                               "because that device's kernel cannot take this model's shapes (one line each, for the "
                               "load report; model/kernel_limits.h). For an RPC device the backend behind it is "
                               "$GLM5NEXT_RPC_BACKEND, else unknown (then nothing is pinned).")
        .def_property_readonly("n_splits", &Engine::n_splits,
                               "Graph splits of the last graph run (1: every op ran on one device).")
        .def_property_readonly("n_graphs_built", &Engine::n_graphs_built,
                               "Graphs built and allocated since load; a ubatch of the last graph's shape reuses it.")
        .def("traffic", [](const Engine & e) {
                const glm5next::GraphTraffic t = e.traffic();
                py::dict out;
                out["splits"] = t.n_splits;
                out["bytes_copied"] = t.bytes_copied;
                out["copy_seconds"] = t.copy_seconds;
                return out;
            },
            "traffic() -> dict(splits, bytes_copied, copy_seconds) of the last graph run: bytes the scheduler copied "
            "between devices and the seconds those copies took, measured only while profile_traffic is on (else 0 "
            "and -1).")
        .def("profile_traffic", &Engine::profile_traffic, py::arg("on"),
             "Measure bytes copied and copy time of every graph run from now on (slows compute: each device syncs "
             "after every node; for benchmarks). ValueError to turn it on while profile_ops is on.")
        .def("profile_ops", &Engine::profile_ops, py::arg("on"),
             "Time every node of every graph run from now on, by graph kind and op (each node runs alone: compute is "
             "slower while on, the shares are what to read; for benchmarks). False stops and forgets the times. "
             "ValueError to turn it on while profile_traffic is on (one timer at a time).")
        .def("op_profile", [](const Engine & e) {
                py::dict out;
                for (const auto & [kind, graph] : e.op_profile()) {
                    py::dict ops;
                    for (const auto & [op, t] : graph.ops) ops[py::str(op)] = py::make_tuple(t.ms, t.nodes);
                    out[py::str(kind)] = py::dict(py::arg("runs") = graph.runs, py::arg("ops") = ops);
                }
                return out;
            },
            "op_profile() -> {graph kind: dict(runs, ops={op: (ms, nodes)})}: what profile_ops timed since it was "
            "turned on, summed over the runs of each kind of graph (\"decode 1 row\", \"verify 2 rows\", \"draft step "
            "1 row, reused selection\", \"prefill 512 rows\", \"decode 4 rows x 4 sequences\"; graph_kind in "
            "runtime/op_profile.h); ops by ggml op name, a product with its weight's type (\"MUL_MAT q8_0\"). Empty "
            "while off.")
        .def("census_graphs", &Engine::census_graphs, py::arg("on"), py::arg("cuda_cc") = glm5next::kCudaCcHopper,
             "Take the census of every graph run from now on (runtime/graph_census.h), CUDA-graph blockers counted "
             "for NVIDIA compute capability cuda_cc (major * 100 + minor * 10; default 900, Hopper). False stops and "
             "forgets. One pass over each run's nodes: for benchmarks and tests.")
        .def("graph_census", [](const Engine & e) {
                py::dict out;
                for (const auto & [kind, c] : e.graph_census()) {
                    py::dict row;
                    row["nodes"] = c.nodes;
                    row["by_device"] = c.by_device;
                    row["splits"] = c.n_splits;
                    row["row_groups"] = c.row_groups;
                    row["parts"] = c.parts;
                    row["products"] = c.products;
                    row["one_matrix_id"] = c.one_matrix_id;
                    row["cuda_graph_blockers"] = c.cuda_graph_blockers;
                    row["readbacks"] = c.readbacks;
                    out[py::str(kind)] = row;
                }
                return out;
            },
            "graph_census() -> {graph kind: dict(nodes, by_device={device: nodes}, splits, row_groups, parts, "
            "products, one_matrix_id, cuda_graph_blockers, readbacks)}: the last graph run of each kind (graph_kind in "
            "runtime/op_profile.h) since census_graphs was turned on. nodes: compute nodes (no views); products: "
            "MUL_MAT, MUL_MAT_ID and the rows kernels; one_matrix_id: MUL_MAT_ID over one matrix (the CPU's "
            "row-by-row route); cuda_graph_blockers: MUL_MAT_ID nodes on a CUDA device (or an RPC one declared so by "
            "GLM5NEXT_RPC_BACKEND) that take ggml-cuda's synchronizing fallback; readbacks: reads of device memory "
            "per run (each waits for the device). Empty while off.")
        .def_property_readonly("draft_requantized", [](const Engine & e) {
                std::map<std::string, std::string> out;
                if (e.draft_weights()) {
                    for (const auto & [name, type] : e.draft_weights()->requantized()) out[name] = ggml_type_name(type);
                }
                return out;
            },
            "The draft layer's tensors requantized at load (draft_type q8_0 / q4_0): GGUF name -> ggml type name.");

    py::class_<Sequence>(mod, "Seq", R"doc(One sequence (llama.cpp's seq) on an Engine: its tokens, the trunk's and the
NextN layer's caches sized for n_ctx rows, its context checkpoints (csrc/runtime/sequence.h; named Seq here, not
Sequence, which type checkers take for typing.Sequence). Its own calls run graphs of it alone, in ubatches.)doc")
        .def(py::init([](Engine & engine, uint32_t n_ctx, uint32_t n_checkpoints, uint32_t checkpoint_every,
                         bool draft_rows, const std::string & cache_type) {
                 return new Sequence(engine, SequenceParams{n_ctx, n_checkpoints, checkpoint_every, draft_rows,
                                                            glm5next::cache_type_from_name(cache_type)});
             }),
             py::arg("engine"), py::arg("n_ctx") = 4096, py::arg("n_checkpoints") = 32,
             py::arg("checkpoint_every") = 8192, py::arg("draft_rows") = true, py::arg("cache_type") = "f16",
             py::keep_alive<1, 2>(),
             "Seq(engine: _core.Engine, n_ctx: int, n_checkpoints: context checkpoints kept (llama-server's "
             "--ctx-checkpoints; 0 = none), checkpoint_every: while prefilling, a checkpoint each time n_past crosses "
             "a multiple of it (tokens), draft_rows: the NextN layer's caches, for drafting (False: none, as without "
             "a NextN layer; has_draft_head then False), cache_type: the attention caches' rows (MLA latent, indexer "
             "keys and gates), 'f16' (llama.cpp's default), 'bf16', 'f32', 'q8_0' or 'q4_0'; pooled keys and KDA states "
             "stay f32).\n"
             "Raises ValueError for n_ctx out of [1, 2^24], checkpoint_every of 0, another cache_type or a quantized one for "
             "widths that are not whole blocks of 32, "
             "RuntimeError when a device cannot hold the caches.")
        .def_property_readonly("engine", [](const Sequence & s) -> const Engine & { return s.engine(); },
                               py::return_value_policy::reference_internal, "The engine it runs on.")
        .def_property_readonly("n_ctx", &Sequence::n_ctx, "Rows its caches hold.")
        .def_property_readonly("cache_type", [](const Sequence & s) { return std::string(ggml_type_name(s.params().cache_type)); },
                               "The attention caches' row type: 'f16', 'bf16' or 'f32'.")
        .def_property_readonly("cache_bytes", &Sequence::cache_bytes,
                               "Memory of its caches (trunk and NextN layer), bytes.")
        .def_property_readonly("cache_cell", [](const Sequence & s) { return s.cache().cell(); },
                               "The engine's cell its trunk caches are views of (0 .. n_seq_max-1), or -1: caches of "
                               "its own (every cell was taken when it was made, or the cells are of another n_ctx or "
                               "cache type).")
        .def("checkpoint_stats", [](const Sequence & e) {
                py::dict d;
                d["count"] = e.checkpoints().size();
                d["bytes"] = e.checkpoints().bytes();
                py::list rows;
                for (size_t i = 0; i < e.checkpoints().size(); ++i) rows.append(e.checkpoints().at(i).n_past());
                d["rows"] = rows;
                d["bytes_each"] = e.checkpoint_bytes();
                d["max_count"] = e.checkpoints().max_count();
                return d;
            },
            "checkpoint_stats() -> dict(count, bytes, rows, bytes_each, max_count): the context checkpoints kept, "
            "the host memory they take (bytes), the sequence length each resumes at, the size of one and the most "
            "kept.")
        .def("eval", &glm5next::eval, py::arg("tokens"), py::arg("logits_all") = false,
             R"doc(Append `tokens` (list of ids) to the sequence and run the trunk over them.

Returns a dict: "logits" float32 [n_tokens or 1, n_vocab], "hidden" float32 [n_tokens, n_embd] (post-norm),
"pools" {DSA layer: int32 [n_tokens, index_topk / kpool]} the chosen indexer pools per row (-1 = none; shared
layers report the full layer's choice they reuse).
Raises ValueError for no tokens, an id outside the vocabulary, or more tokens than the context has left.)doc")
        .def("draft_rows", &glm5next::draft_rows, py::arg("hidden"), py::arg("next_tokens"), py::arg("pos0"),
             py::arg("saved_pools") = py::none(), py::arg("saved_p0") = -1,
             R"doc(Write NextN draft rows (hidden[i], next_tokens[i]) at positions pos0.. of the draft cache.

hidden: float32 [n, n_embd] (trunk post-norm states, or the previous step's z); next_tokens: n ids x_{p+1}.
saved_pools (with saved_p0 < pos0, n == 1): attend exactly the selection row saved_p0 made (index sharing).
Returns a dict for the last row: "logits" float32 [n_vocab], "z" float32 [n_embd], "pools" int32 [index_topk/kpool].
Raises ValueError without a NextN layer, for a gap after the rows written, or past n_ctx.)doc")
        .def("verify", &glm5next::verify, py::arg("tokens"),
             R"doc(The verify pass of a draft-MTP round over `tokens` (one ubatch), as provisional rows. Returns
"logits" float32 [n, n_vocab] and "hidden" float32 [n, n_embd] of every row. commit(n_keep) must follow before
anything else runs on the sequence. Raises ValueError for rows that do not fit one ubatch or the context.)doc")
        .def("commit", &Sequence::commit, py::arg("n_keep"), py::call_guard<py::gil_scoped_release>(),
             R"doc(Keep the first n_keep rows of the pending verify pass (1 <= n_keep <= its rows): KDA states and
conv windows roll back to row n_keep-1's snapshot, later attention rows are dropped. Raises RuntimeError without
a pending verify pass or for n_keep out of range.)doc")
        .def_property_readonly("has_draft_head", &Sequence::has_draft_head)
        .def("kda_state", &glm5next::kda_state, py::arg("layer"),
             "Copies of KDA layer `layer`'s caches: conv float32 [3*inner, K-1], state float32 [n_head, d, d].")
        .def("save_state", [](const Sequence & e) {
                std::vector<uint8_t> data;
                {
                    py::gil_scoped_release release;
                    data = e.save_state();
                }
                return py::bytes(reinterpret_cast<const char *>(data.data()), data.size());
            },
            "save_state() -> bytes: the whole sequence (tokens, the trunk's and the NextN layer's cache rows, context "
            "checkpoints; csrc/runtime/sequence_state.h), for load_state on a sequence of the same model.")
        .def("load_state", [](Sequence & e, const py::bytes & data) {
                const std::string_view view(data);
                py::gil_scoped_release release;
                e.load_state(reinterpret_cast<const uint8_t *>(view.data()), view.size());
            },
            py::arg("data"),
            "load_state(data: bytes): replace the sequence with one save_state returned (by this sequence or another of "
            "the same model); a prompt sharing a prefix with it then resumes from it. Raises ValueError, naming what "
            "is wrong and keeping the sequence as it was, for bytes that are not a saved sequence, a damaged one, one "
            "of another model or one longer than n_ctx.")
        .def("reset", &Sequence::reset, py::call_guard<py::gil_scoped_release>(), "Forget the sequence (caches cleared, n_past = 0).")
        .def_property_readonly("n_past", &Sequence::n_past, "Tokens in the sequence.")
        .def_property_readonly("tokens", &Sequence::tokens, "The sequence's tokens (one per trunk row), a copy.");

    py::class_<glm5next::PyDraftChain>(mod, "DraftChain", R"doc(The NextN draft steps of one round (docs/runtime.md,
draft-MTP round, step 1): begin() writes the draft-head rows up to step 0; each next(token) is the following
step on (z of the step before, token). With share=True steps >= 1 attend exactly step 0's selection (index
sharing); with share=False each runs the head's own indexer. The caller picks the tokens.)doc")
        .def(py::init<Sequence &, bool>(), py::arg("sequence"), py::arg("share"), py::keep_alive<1, 2>(),
             "Raises ValueError when the sequence's engine has no draft head.")
        .def("begin", &glm5next::PyDraftChain::begin, py::arg("hidden"), py::arg("next_tokens"), py::arg("pos0"),
             R"doc(Step 0: write rows (hidden[i], next_tokens[i]) at positions pos0.. of the draft cache (hidden
float32 [n, n_embd], trunk post-norm states; the last row is step 0). Returns "logits" float32 [n_vocab], "z"
float32 [n_embd], "pools" int32 [index_topk / kpool] of step 0.)doc")
        .def("next", &glm5next::PyDraftChain::next, py::arg("token"),
             "The next step on (z of the step before, token); returns its logits, z and pools (the saved ones when "
             "it reuses step 0's selection). Raises RuntimeError before begin().")
        .def_property_readonly("step", [](const glm5next::PyDraftChain & c) { return c.chain.step(); },
                               "The step whose output is current (0 after begin).")
        .def_property_readonly("selection_pos", [](const glm5next::PyDraftChain & c) { return c.chain.selection_pos(); },
                               "The position whose selection the current step attends: p0 for shared steps, else "
                               "its own row.");
}
