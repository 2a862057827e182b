#include "runtime/devices.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <algorithm>
#include <stdexcept>

#include "ggml-backend.h"
#include "ggml-rpc.h"

namespace glm5next {

namespace {

// ggml's RPC protocol (ggml-rpc.cpp of the linked ggml): a request is | cmd (1 byte) | size (8 bytes) | data |,
// a response | size (8 bytes) | data |. HELLO is command 14 in every protocol version; its request carries the
// client's transport capabilities (24 bytes, all zero: plain TCP), its response starts major, minor, patch.
constexpr uint8_t kRpcHello = 14;
constexpr size_t kRpcCapsSize = 24;

const char * type_name(enum ggml_backend_dev_type type) {
    switch (type) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        case GGML_BACKEND_DEVICE_TYPE_ACCEL: return "accel";
        case GGML_BACKEND_DEVICE_TYPE_META: return "meta";
    }
    return "unknown";
}

ggml_backend_reg_t rpc_reg() {
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("RPC");
    if (reg == nullptr) {
        throw std::runtime_error("the installed ggml has no RPC backend: rebuild llama-cpp-python with "
                                 "CMAKE_ARGS=-DGGML_RPC=ON (scripts/setup.sh does)");
    }
    return reg;
}

void split_endpoint(const std::string & endpoint, std::string & host, std::string & port) {
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
        throw std::invalid_argument("--rpc " + endpoint + ": expected HOST:PORT");
    }
    host = endpoint.substr(0, colon);
    port = endpoint.substr(colon + 1);
    char * end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || p < 1 || p > 65535) {
        throw std::invalid_argument("--rpc " + endpoint + ": port '" + port + "' is not a number in 1..65535");
    }
}

// A connected socket, closed on scope exit.
struct Socket {
    int fd = -1;
    Socket() = default;
    Socket(Socket && o) noexcept : fd(o.fd) { o.fd = -1; }
    Socket(const Socket &) = delete;
    ~Socket() {
        if (fd >= 0) close(fd);
    }
};

bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    return poll(&p, 1, (int) left.count()) == 1 && (p.revents & events);
}

bool send_all(int fd, const void * data, size_t n, std::chrono::steady_clock::time_point deadline) {
    const char * p = static_cast<const char *>(data);
    while (n > 0) {
        if (!wait_for(fd, POLLOUT, deadline)) return false;
        const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        p += k;
        n -= (size_t) k;
    }
    return true;
}

bool recv_all(int fd, void * data, size_t n, std::chrono::steady_clock::time_point deadline) {
    char * p = static_cast<char *>(data);
    while (n > 0) {
        if (!wait_for(fd, POLLIN, deadline)) return false;
        const ssize_t k = recv(fd, p, n, 0);
        if (k <= 0) return false;
        p += k;
        n -= (size_t) k;
    }
    return true;
}

// A TCP connection to host:port within the deadline: the connected socket, or fd -1 and `why`.
Socket connect_to(const std::string & endpoint, const std::string & host, const std::string & port,
                  std::chrono::steady_clock::time_point deadline, std::string & why) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
        throw std::invalid_argument("--rpc " + endpoint + ": cannot resolve host '" + host + "': " + gai_strerror(rc));
    }
    Socket s;
    why = "no address";
    for (addrinfo * a = found; a != nullptr && s.fd < 0; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
            socklen_t len = sizeof(err);
            err = wait_for(fd, POLLOUT, deadline) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : ETIMEDOUT;
        }
        if (err == 0) {
            s.fd = fd;
        } else {
            why = strerror(err);
            close(fd);
        }
    }
    freeaddrinfo(found);
    return s;
}

// Connects to `endpoint` and exchanges ggml's RPC hello; throws std::invalid_argument naming what failed.
void check_rpc_endpoint(const std::string & endpoint, int timeout_ms) {
    std::string host, port, why;
    split_endpoint(endpoint, host, port);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    Socket s = connect_to(endpoint, host, port, deadline, why);
    if (s.fd < 0) throw std::invalid_argument("--rpc " + endpoint + ": cannot connect: " + why);

    uint8_t request[1 + 8 + kRpcCapsSize] = {kRpcHello};
    const uint64_t size = kRpcCapsSize;
    std::memcpy(request + 1, &size, sizeof(size));
    uint64_t response_size = 0;
    uint8_t version[3] = {};
    if (!send_all(s.fd, request, sizeof(request), deadline) || !recv_all(s.fd, &response_size, 8, deadline) ||
        response_size < sizeof(version) || response_size > 4096 || !recv_all(s.fd, version, sizeof(version), deadline)) {
        throw std::invalid_argument("--rpc " + endpoint + ": no ggml RPC hello within " + std::to_string(timeout_ms) +
                                    " ms (not a ggml RPC server, or one busy with another client)");
    }
    if (version[0] != RPC_PROTO_MAJOR_VERSION || version[1] > RPC_PROTO_MINOR_VERSION) {
        throw std::invalid_argument("--rpc " + endpoint + ": the server speaks RPC protocol " + std::to_string(version[0]) +
                                    "." + std::to_string(version[1]) + ", this ggml " +
                                    std::to_string(RPC_PROTO_MAJOR_VERSION) + "." +
                                    std::to_string(RPC_PROTO_MINOR_VERSION));
    }
}

std::mutex added_mutex;
std::vector<std::string> added;  // endpoints of the RPC servers in the registry (which keeps them for good)

// ggml's RPC client aborts the process when a server goes away (GGML_ABORT in ggml-rpc.cpp): name the RPC servers
// in use, and those that no longer accept a connection (a dying server may still accept for a moment, so the
// first list is the one to trust), then end the process with status 1 (no backtrace: the cause is a lost device,
// not a bug).
void on_ggml_abort(const char * message) {
    std::string in_use, lost;
    for (const std::string & endpoint : added) {  // no lock: the process is ending, and `added` only grows
        in_use += " " + endpoint;
        std::string host, port, why;
        split_endpoint(endpoint, host, port);
        try {
            if (connect_to(endpoint, host, port, std::chrono::steady_clock::now() + std::chrono::milliseconds(500), why).fd < 0) {
                lost += " " + endpoint;
            }
        } catch (const std::exception &) {
            lost += " " + endpoint;
        }
    }
    std::fprintf(stderr, "glm5next: ggml ended the process: %s\n", message);
    std::fprintf(stderr, "glm5next: RPC servers in use:%s; not answering now:%s\n", in_use.c_str(),
                 lost.empty() ? " (none yet)" : lost.c_str());
    std::fflush(stderr);
    _exit(1);
}

}  // namespace

std::vector<DeviceInfo> list_devices(bool memory) {
    std::vector<DeviceInfo> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        DeviceInfo d{ggml_backend_dev_name(dev), ggml_backend_dev_description(dev), type_name(ggml_backend_dev_type(dev))};
        if (memory) ggml_backend_dev_memory(dev, &d.memory_free, &d.memory_total);
        out.push_back(d);
    }
    return out;
}

void add_rpc_servers(const std::vector<std::string> & endpoints, int timeout_ms) {
    const std::lock_guard<std::mutex> lock(added_mutex);
    using add_server_t = ggml_backend_reg_t (*)(const char *);
    auto add_server = (add_server_t) ggml_backend_reg_get_proc_address(rpc_reg(), "ggml_backend_rpc_add_server");
    if (add_server == nullptr) throw std::runtime_error("the RPC backend has no ggml_backend_rpc_add_server");
    for (const std::string & endpoint : endpoints) {
        if (std::find(added.begin(), added.end(), endpoint) != added.end()) continue;
        check_rpc_endpoint(endpoint, timeout_ms);
        ggml_backend_register(add_server(endpoint.c_str()));
        added.push_back(endpoint);
        ggml_set_abort_callback(on_ggml_abort);
    }
}

void serve_rpc(const std::string & endpoint, int n_threads, const std::string & cache_dir) {
    std::string host, port;
    split_endpoint(endpoint, host, port);
    using start_server_t = void (*)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *);
    auto start = (start_server_t) ggml_backend_reg_get_proc_address(rpc_reg(), "ggml_backend_rpc_start_server");
    if (start == nullptr) throw std::runtime_error("the RPC backend has no ggml_backend_rpc_start_server");
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu == nullptr) throw std::runtime_error("ggml has no CPU device");
    start(endpoint.c_str(), cache_dir.empty() ? nullptr : cache_dir.c_str(), (size_t) n_threads, 1, &cpu);
    throw std::runtime_error("the RPC server at " + endpoint + " stopped (port in use?)");
}

}  // namespace glm5next
