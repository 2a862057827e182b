// ggml's devices as this runtime sees them (docs/runtime.md, placement and devices): the registry's CPU, the GPUs the
// installed ggml was built with, and ggml RPC servers on other processes or machines (llama.cpp's --rpc).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace glm5next {

struct DeviceInfo {
    std::string name;         // "CPU", "CUDA0", "RPC0[127.0.0.1:50052]", ...
    std::string description;
    std::string type;         // "cpu", "gpu", "igpu", "accel", "meta"
    size_t memory_free = 0;   // bytes
    size_t memory_total = 0;  // bytes
};

// Every device of ggml's registry, in registry order (RPC servers once added). With `memory` each device is asked
// for its free and total memory: a network call for an RPC device, and ggml's RPC client aborts the process when
// the server is gone; without it those fields are 0.
std::vector<DeviceInfo> list_devices(bool memory);

// Adds the devices of ggml RPC servers to the registry, as llama.cpp's --rpc does. Each endpoint "HOST:PORT" is
// first checked here: it parses, something accepts a TCP connection there within `timeout_ms`, and it answers
// ggml's RPC hello with this ggml's protocol version, because ggml's RPC client aborts the process on a failed
// connection or handshake. An endpoint added before is skipped. Throws std::invalid_argument naming the endpoint.
// From then on, when ggml aborts (its RPC client does when a server goes away mid-run), the process ends with
// status 1 and a message naming the endpoints that no longer answer, instead of ggml's backtrace.
void add_rpc_servers(const std::vector<std::string> & endpoints, int timeout_ms = 5000);

// Serves this machine's CPU backend as a ggml RPC device at `endpoint` ("HOST:PORT") with `n_threads` threads,
// caching large tensors under `cache_dir` when it is not empty. Blocks for the life of the process. Throws
// std::invalid_argument for a malformed endpoint and std::runtime_error when this ggml has no RPC backend.
void serve_rpc(const std::string & endpoint, int n_threads, const std::string & cache_dir);

}  // namespace glm5next
