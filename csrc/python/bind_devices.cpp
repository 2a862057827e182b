// Python bindings of ggml's devices: _core.list_devices, _core.add_rpc_servers, _core.serve_rpc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "runtime/devices.h"

namespace py = pybind11;

void bind_devices(py::module_ & mod) {
    mod.def("list_devices", [](bool memory) {
                py::list out;
                for (const glm5next::DeviceInfo & d : glm5next::list_devices(memory)) {
                    py::dict row;
                    row["name"] = d.name;
                    row["description"] = d.description;
                    row["type"] = d.type;
                    row["memory_free"] = d.memory_free;
                    row["memory_total"] = d.memory_total;
                    out.append(row);
                }
                return out;
            },
            py::arg("memory") = false,
            "list_devices(memory=False) -> list of dict(name, description, type: 'cpu'|'gpu'|'igpu'|'accel'|'meta', "
            "memory_free, memory_total (bytes; 0 unless memory=True)): ggml's registry in order, RPC servers included "
            "once added. memory=True asks each device (a network call for RPC devices; ggml's RPC client aborts the "
            "process when a server is gone).");
    mod.def("add_rpc_servers", &glm5next::add_rpc_servers, py::arg("endpoints"), py::arg("timeout_ms") = 5000,
            py::call_guard<py::gil_scoped_release>(),
            "add_rpc_servers(endpoints: list of 'HOST:PORT', timeout_ms=5000): add the devices of ggml RPC servers "
            "(llama.cpp's --rpc) after checking that each answers ggml's RPC hello with this ggml's protocol "
            "version (ggml's client would abort the process otherwise). An endpoint added before is skipped. Raises "
            "ValueError naming the endpoint that is malformed, unreachable or not a matching ggml RPC server, "
            "RuntimeError when this ggml was built without RPC.");
    mod.def("serve_rpc", &glm5next::serve_rpc, py::arg("endpoint"), py::arg("n_threads"), py::arg("cache_dir") = "",
            py::call_guard<py::gil_scoped_release>(),
            "serve_rpc(endpoint: 'HOST:PORT', n_threads: int, cache_dir: str = ''): serve this machine's CPU as a "
            "ggml RPC device; blocks for the life of the process (ggml's RPC protocol has no authentication). "
            "Raises ValueError for a malformed endpoint, RuntimeError when ggml has no RPC backend or the server "
            "cannot start.");
}
