"""A process whose graphs run on a second live thread is told so once on stderr (runtime/graph_threads.h): libgomp
then throttles every OpenMP team's barriers and every graph runs several times slower. Threads that ran graphs one
after another (the first ended), or with one CPU thread (no OpenMP team), are not warned about. Each case runs in a
fresh process: the warning is once per process, and a team lives as long as its thread."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import random_tokens

WARNING = "glm5next: warning: ggml graphs now run on 2 live threads"

SCRIPT = """
import os, sys, threading, time
from glm5next_runtime import Model
path, n_threads, case = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tokens = [int(t) for t in sys.argv[4].split(",")]
first = Model(path, n_ctx=256, n_threads=n_threads)
second = first.another_sequence()
def os_threads():
    return len(os.listdir("/proc/self/task"))
def on_thread(model):
    before = os_threads()
    t = threading.Thread(target=model.eval, args=(tokens,))
    t.start()
    t.join()
    # join returns once Python is done with the thread, before the OS thread exits and runs its C++ thread_local
    # destructors (where it stops being counted): wait for that, as a later graph would on a real server
    deadline = time.monotonic() + 10
    while os_threads() > before and time.monotonic() < deadline:
        time.sleep(0.001)
if case == "main_then_thread":    # the main thread's team lives on while the other thread runs
    first.eval(tokens)
    on_thread(second)
elif case == "thread_then_main":  # the other thread's team ended with it
    on_thread(second)
    first.eval(tokens)
print("ran", flush=True)
"""


def run(gguf, n_threads: int, case: str) -> str:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(gguf), str(n_threads), case,
                           ",".join(map(str, random_tokens(12)))], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr
    return proc.stderr


def test_graphs_on_a_second_live_thread_are_warned_about(plain_gguf):
    assert WARNING in run(plain_gguf, 2, "main_then_thread")


@pytest.mark.parametrize("n_threads,case", [(2, "thread_then_main"), (1, "main_then_thread")])
def test_graphs_on_one_live_thread_at_a_time_or_single_threaded_are_not(plain_gguf, n_threads, case):
    assert "glm5next: warning: ggml graphs" not in run(plain_gguf, n_threads, case)
