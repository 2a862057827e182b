// Python bindings of the model loader: _core.Model, _core.ModelError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "model/gguf_keys.h"
#include "model/model.h"

namespace py = pybind11;

namespace glm5next {

namespace {

// GGUF strings are meant to be UTF-8; a token that is not comes back as bytes rather than failing the call.
py::object str_or_bytes(const char * s) {
    PyObject * u = PyUnicode_DecodeUTF8(s, Py_ssize_t(std::strlen(s)), "strict");
    if (u) return py::reinterpret_steal<py::object>(u);
    PyErr_Clear();
    return py::bytes(s);
}

py::object scalar_at(gguf_type t, const void * data, size_t i) {
    switch (t) {
        case GGUF_TYPE_UINT8: return py::int_(static_cast<const uint8_t *>(data)[i]);
        case GGUF_TYPE_INT8: return py::int_(static_cast<const int8_t *>(data)[i]);
        case GGUF_TYPE_UINT16: return py::int_(static_cast<const uint16_t *>(data)[i]);
        case GGUF_TYPE_INT16: return py::int_(static_cast<const int16_t *>(data)[i]);
        case GGUF_TYPE_UINT32: return py::int_(static_cast<const uint32_t *>(data)[i]);
        case GGUF_TYPE_INT32: return py::int_(static_cast<const int32_t *>(data)[i]);
        case GGUF_TYPE_UINT64: return py::int_(static_cast<const uint64_t *>(data)[i]);
        case GGUF_TYPE_INT64: return py::int_(static_cast<const int64_t *>(data)[i]);
        case GGUF_TYPE_FLOAT32: return py::float_(static_cast<const float *>(data)[i]);
        case GGUF_TYPE_FLOAT64: return py::float_(static_cast<const double *>(data)[i]);
        case GGUF_TYPE_BOOL: return py::bool_(static_cast<const uint8_t *>(data)[i] != 0);
        default: return py::none();  // strings and arrays are handled by the caller
    }
}

py::object kv_value(const gguf_context * ctx, int64_t id) {
    const gguf_type t = gguf_get_kv_type(ctx, id);
    if (t == GGUF_TYPE_STRING) return str_or_bytes(gguf_get_val_str(ctx, id));
    if (t != GGUF_TYPE_ARRAY) return scalar_at(t, gguf_get_val_data(ctx, id), 0);
    const gguf_type et = gguf_get_arr_type(ctx, id);
    const size_t n = gguf_get_arr_n(ctx, id);
    py::list out(n);
    if (et == GGUF_TYPE_STRING) {
        for (size_t i = 0; i < n; ++i) out[i] = str_or_bytes(gguf_get_arr_str(ctx, id, i));
    } else {
        const void * data = gguf_get_arr_data(ctx, id);
        for (size_t i = 0; i < n; ++i) out[i] = scalar_at(et, data, i);
    }
    return std::move(out);
}

py::dict hparams_dict(const HParams & hp) {
    py::dict d;
    d["arch"] = hp.arch;
    d["n_vocab"] = hp.n_vocab;
    d["n_embd"] = hp.n_embd;
    d["n_ff"] = hp.n_ff;
    d["n_ctx_train"] = hp.n_ctx_train;
    d["n_layer_all"] = hp.n_layer_all;
    d["n_nextn"] = hp.n_nextn;
    d["n_trunk"] = hp.n_trunk();
    d["n_head"] = hp.n_head;
    d["head_count_kv"] = hp.head_count_kv;
    d["rms_eps"] = hp.rms_eps;
    d["ln_eps"] = hp.ln_eps;
    d["q_lora_rank"] = hp.q_lora_rank;
    d["kv_lora_rank"] = hp.kv_lora_rank;
    d["head_k_mla"] = hp.head_k_mla;
    d["head_v_mla"] = hp.head_v_mla;
    d["idx_n_head"] = hp.idx_n_head;
    d["idx_head_dim"] = hp.idx_head_dim;
    d["idx_top_k"] = hp.idx_top_k;
    d["idx_kpool"] = hp.idx_kpool;
    d["idx_select_tail"] = hp.idx_select_tail;
    d["idx_full"] = std::vector<bool>(hp.idx_full);
    d["index_share_mtp"] = hp.index_share_mtp;
    d["n_dense_lead"] = hp.n_dense_lead;
    d["n_expert"] = hp.n_expert;
    d["n_expert_used"] = hp.n_expert_used;
    d["n_expert_shared"] = hp.n_expert_shared;
    d["n_expert_groups"] = hp.n_expert_groups;
    d["n_group_used"] = hp.n_group_used;
    d["n_ff_exp"] = hp.n_ff_exp;
    d["expert_weights_scale"] = hp.expert_weights_scale;
    d["expert_weights_norm"] = hp.expert_weights_norm;
    d["swiglu_clamp_exp"] = hp.swiglu_clamp_exp;
    d["swiglu_clamp_shexp"] = hp.swiglu_clamp_shexp;
    d["ssm_conv_kernel"] = hp.ssm_conv_kernel;
    d["kda_head_dim"] = hp.kda_head_dim;
    d["has_kda_lower_bound"] = hp.has_kda_lower_bound;
    d["kda_lower_bound"] = hp.kda_lower_bound;
    d["hc_mult"] = hp.hc_mult;
    d["hc_sinkhorn_iters"] = hp.hc_sinkhorn_iters;
    d["hc_eps"] = hp.hc_eps;
    return d;
}

std::vector<KvOverride> parse_overrides(const std::vector<std::string> & override_kv) {
    std::vector<KvOverride> overrides;
    for (const std::string & value : override_kv) {
        for (KvOverride & o : parse_kv_overrides(value)) overrides.push_back(std::move(o));
    }
    return overrides;
}

std::unique_ptr<Model> load(const std::string & path, const std::vector<std::string> & override_kv, bool use_mmap,
                            bool use_mlock) {
    const std::vector<KvOverride> overrides = parse_overrides(override_kv);
    py::gil_scoped_release release;  // parsing metadata, reading the file: touches no Python object
    return Model::load(path, overrides, LoadOptions{use_mmap, use_mlock});
}

py::list tensors(const Model & m) {
    py::list out;
    const gguf_context * ctx = m.gguf();
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx); ++i) {
        const ggml_tensor * t = m.tensors.at(gguf_get_tensor_name(ctx, i));
        py::list shape;
        for (int d = 0; d < ggml_n_dims(t); ++d) shape.append(t->ne[d]);
        out.append(py::make_tuple(ggml_get_name(t), ggml_type_name(t->type), shape, ggml_nbytes(t)));
    }
    return out;
}

// A read-only uint8 view of the mapped bytes; it keeps the model alive.
py::array tensor_data(py::object self, const std::string & name) {
    const Model & m = self.cast<const Model &>();
    const auto it = m.tensors.find(name);
    if (it == m.tensors.end()) throw py::key_error(name);
    const ggml_tensor * t = it->second;
    py::array out(py::dtype::of<uint8_t>(), {py::ssize_t(ggml_nbytes(t))}, {py::ssize_t(1)}, t->data, self);
    out.attr("setflags")(py::arg("write") = false);
    return out;
}

py::object metadata(const Model & m, const std::string & key) {
    const int64_t id = gguf_find_key(m.gguf(), map_arch_prefix(key, m.hp.arch).c_str());
    if (id < 0) throw py::key_error(key);
    return kv_value(m.gguf(), id);
}

py::tuple vocab(const Model & m) {
    const Vocab & v = m.vocab;
    if (v.tokens.empty()) throw ModelError(m.path + ": the file has no tokenizer (tokenizer.ggml.tokens)");
    py::list tokens(v.tokens.size());
    for (size_t i = 0; i < v.tokens.size(); ++i) tokens[i] = str_or_bytes(v.tokens[i].c_str());
    py::list merges(v.merges.size());
    for (size_t i = 0; i < v.merges.size(); ++i) merges[i] = str_or_bytes(v.merges[i].c_str());
    return py::make_tuple(tokens, v.types, merges, v.special);
}

py::object chat_template(const Model & m) {
    const auto t = KeyReader(m.gguf(), m.path, "").get_str("tokenizer.chat_template");
    if (!t) return py::none();
    py::object text = str_or_bytes(t->c_str());
    if (!py::isinstance<py::str>(text)) throw ModelError(m.path + ": key tokenizer.chat_template is not UTF-8 text");
    return text;
}

}  // namespace

}  // namespace glm5next

void bind_model(py::module_ & mod) {
    using namespace glm5next;
    py::register_exception<ModelError>(mod, "ModelError", PyExc_ValueError);

    py::class_<Model>(mod, "Model", R"doc(A glm5next GGUF loaded for inference (metadata + memory-mapped weights).

Both architecture spellings load ("glm5next" and "glm5-next"). Weights stay in a read-only mapping of the
file; nothing is copied.
)doc")
        .def(py::init(&load), py::arg("path"), py::arg("override_kv") = std::vector<std::string>{},
             py::arg("use_mmap") = true, py::arg("use_mlock") = false,
             R"doc(Load the GGUF at `path`.

Args:
    path: str, path of a .gguf file (combined, trunk-only or draft-only layout).
    override_kv: list of str, llama.cpp --override-kv "KEY=TYPE:VALUE" (TYPE int, float, bool or str; bool
        values true/false; one str may hold several, comma-separated, as llama.cpp allows: a comma separates
        only where "KEY=TYPE:" follows, so str values may hold commas), applied in order before any
        hyper-parameter is read or checked. KEY may use
        either arch prefix ("glm5next." or "glm5-next."). An int/float override of an existing key keeps
        its stored type (range-checked).
    use_mmap: bool, map the file and fault every page in at load (as llama.cpp prefetches; the pages are the page
        cache's, shared); False: read it into anonymous memory (llama.cpp's --no-mmap).
    use_mlock: bool, lock the weights' pages in RAM (llama.cpp's --mlock); `locked` says whether it held.

Raises:
    ModelError (a ValueError): the file is missing, not GGUF, truncated or corrupt; the architecture is
        not glm5next/glm5-next; a required key is missing or of the wrong type; a value is inconsistent
        (e.g. nextn_predict_layers >= block_count, kpool <= 1 or not dividing top_k); a required tensor
        is missing or mis-shaped; an override is malformed or does not fit its key. The message names the
        file and the key, tensor or override.
)doc")
        .def_readonly("path", &Model::path, "str: the path the model was loaded from.")
        .def_property_readonly("arch", [](const Model & m) { return m.hp.arch; },
                               "str: general.architecture as stored ('glm5next' or 'glm5-next').")
        .def_property_readonly("n_vocab", [](const Model & m) { return m.hp.n_vocab; }, "int: vocabulary size.")
        .def_property_readonly("locked", [](const Model & m) { return m.locked; },
                               "bool: use_mlock was asked and the weights' pages are locked in RAM.")
        .def_property_readonly("lock_error", [](const Model & m) { return m.lock_error; },
                               "str: why mlock failed (its errno's text; '' when it held or was not asked).")
        .def_property_readonly("draft_only", [](const Model & m) { return m.draft_only; },
                               "bool: the file holds only the NextN (draft) layer, no trunk layers.")
        .def_property_readonly("hparams", [](const Model & m) { return hparams_dict(m.hp); },
                               R"doc(dict: every hyper-parameter (HParams in csrc/model/hparams.h) after overrides.

Keys: arch, n_vocab, n_embd, n_ff, n_ctx_train, n_layer_all, n_nextn, n_trunk, n_head, head_count_kv (list of
int, [n_layer_all], 0 = KDA layer), rms_eps, ln_eps, q_lora_rank, kv_lora_rank, head_k_mla, head_v_mla,
idx_n_head, idx_head_dim, idx_top_k, idx_kpool, idx_select_tail, idx_full (list of bool, [n_trunk]),
index_share_mtp, n_dense_lead, n_expert, n_expert_used, n_expert_shared, n_expert_groups, n_group_used,
n_ff_exp, expert_weights_scale, expert_weights_norm, swiglu_clamp_exp / swiglu_clamp_shexp (list of float,
[n_layer_all], 0 = no clamp), ssm_conv_kernel, kda_head_dim, has_kda_lower_bound, kda_lower_bound, hc_mult,
hc_sinkhorn_iters, hc_eps. Floats are the stored f32 values widened to Python floats.
)doc")
        .def("tensors", &tensors,
             "tensors() -> list of (name: str, ggml type name: str, shape: list of int in ggml order (ne[0] first, "
             "trailing 1s dropped), nbytes: int), in file order.")
        .def("place", &Model::place, py::arg("device_of"),
             "place(device_of: dict[str, str]) -> None: copy the named weights from the mapping into a weight "
             "buffer of the named ggml device (e.g. {'blk.3.attn_output.weight': 'RPC0'}); the rest stay memory-"
             "mapped on the CPU. Call once, before an Engine is made on the model. Raises ModelError (ValueError) "
             "for an unknown tensor or device or a buffer that cannot be allocated.")
        .def_property_readonly("devices", [](const Model & m) {
                std::vector<std::string> names;
                for (ggml_backend_dev_t dev : m.devices()) names.push_back(ggml_backend_dev_name(dev));
                return names;
            },
            "list[str]: the devices other than the CPU that hold weights after place().")
        .def("tensor_table", [](const Model & m) {
                py::list out;
                for (const auto & t : m.tensor_table) out.append(py::make_tuple(t.name, t.ne, t.required));
                return out;
            },
             "tensor_table() -> list of (name: str, shape: list of int in ggml order (trailing 1s dropped), required: "
             "bool): every tensor the loader looked for under this file's hyper-parameters (docs/gguf.md, Tensors); a "
             "file holds all required ones and may hold the others.")
        .def("tensor_data", &tensor_data, py::arg("name"),
             "tensor_data(name) -> read-only numpy uint8 array [nbytes]: the tensor's bytes in the mapping (no "
             "copy; keeps the model alive). Raises KeyError for an unknown name.")
        .def("metadata", &metadata, py::arg("key"),
             "metadata(key) -> value of GGUF key `key` after overrides: int, float, bool, str (bytes if not "
             "UTF-8) or a list of those. `key` may use either arch prefix. Raises KeyError when absent.")
        .def("vocab", &vocab,
             R"doc(vocab() -> (tokens, token_types, merges, special_ids).

tokens: list[str] ([n_vocab]; bytes for a token that is not UTF-8), token_types: list[int] (llama.cpp types:
1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), merges: list[str] ("left right"; bytes for one
that is not UTF-8),
special_ids: dict with those of bos, eos, eot, eom, unk, pad that the file sets.
Raises ModelError (ValueError) when the file has no tokenizer.
)doc")
        .def_property_readonly("kv_overrides",
                               [](const Model & m) {
                                   std::vector<std::tuple<std::string, std::string, std::string>> out;
                                   for (const KvOverride & o : m.kv_overrides) out.emplace_back(o.key, o.type, o.value);
                                   return out;
                               },
                               R"doc(list of (key, type, value) str tuples: the --override-kv entries applied at load, in
order, each key spelled as the file's architecture spells it (glm5next. or glm5-next.), type int, float, bool or str,
value as given (what llama.cpp's kv_overrides takes, typed).)doc")
        .def_property_readonly("chat_template", &chat_template,
                               "str or None: tokenizer.chat_template (jinja2), None when absent.");

    mod.def("read_hparams",
            [](const std::string & path, const std::vector<std::string> & override_kv) {
                const std::vector<KvOverride> overrides = parse_overrides(override_kv);
                HParams hp;
                {
                    py::gil_scoped_release release;
                    hp = Model::load_hparams(path, overrides);
                }
                return hparams_dict(hp);
            },
            py::arg("path"), py::arg("override_kv") = std::vector<std::string>{},
            R"doc(The hyper-parameters of a glm5next GGUF (the dict of Model.hparams) read and checked by the loader's
rules without loading tensors or vocabulary: the converter runs it on the metadata it is about to write. Raises
ModelError (a ValueError) naming the file and the key, as Model() does.)doc");

}
