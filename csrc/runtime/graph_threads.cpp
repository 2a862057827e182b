#include "runtime/graph_threads.h"

#include <atomic>
#include <cstdio>

namespace glm5next {
namespace {

std::atomic<int> g_alive{0};
std::atomic<bool> g_warned{false};

// A thread's mark: counted from its first multi-threaded graph until it ends (with its OpenMP team).
struct Mark {
    bool counted = false;
    ~Mark() {
        if (counted) --g_alive;
    }
};
thread_local Mark t_mark;

}  // namespace

void note_graph_thread(int n_threads) {
    if (n_threads <= 1 || t_mark.counted) return;
    t_mark.counted = true;
    if (++g_alive > 1 && !g_warned.exchange(true)) {
        std::fprintf(stderr,
                     "glm5next: warning: ggml graphs now run on %d live threads of this process; each keeps an OpenMP "
                     "team, and once the teams hold more threads than there are CPUs every graph runs several times "
                     "slower (libgomp's throttled barriers). Run a process's generations from one thread (a "
                     "glm5next_runtime.Scheduler runs them all on its own).\n",
                     g_alive.load());
    }
}

}  // namespace glm5next
