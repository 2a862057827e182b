// Which threads run this process's graphs: a warning when two live threads have (llama.cpp's trap as well).
//
// ggml's CPU backend, built with OpenMP as llama-cpp-python builds it, runs a graph on an OpenMP team of the thread
// that calls it, and libgomp keeps a team for every host thread that ever opened one, until that thread ends. Once the
// process's teams hold more threads than it has CPUs, libgomp waits at every barrier of every team with ~100 spins
// before it sleeps on a futex (libgomp env.c: gomp_throttled_spin_count_var), and ggml passes a barrier after every
// node. Measured (bundled model q8_0, -t 2 on 2 cores, 4 sequences batched): 1,050-1,130 tok/s when one thread ran
// the graphs; 142-193 tok/s on a second thread while the first lived (a Model used on the main thread, then by a
// Scheduler; a web framework calling generate() from its worker threads); 1,070-1,100 again on the first once the
// second had ended. Running every graph on one dedicated thread avoids it, but a hand-over per graph cost 80 us on
// these machines (a condition variable each way) and ~15% of the bundled model's decode throughput (2 of 3
// alternating runs; the third, noise), so the engine
// runs graphs on the caller's thread and says so once instead; the server runs every graph on its scheduler's thread.
#pragma once

namespace glm5next {

// Called before a graph runs on the calling thread with n_threads CPU threads: the first time a second live thread
// runs one with n_threads > 1 (an OpenMP team), writes a warning to stderr naming the cause and the remedy.
void note_graph_thread(int n_threads);

}  // namespace glm5next
