"""Concurrent requests on -np slots (issue 24): the slots are sequences of one engine whose rounds run batched
(glm5next_runtime/scheduler.py), and every request's tokens, draft_n and draft_n_accepted equal its run alone on the
same server, greedy and seeded, with a 1,200-token prompt arriving while the others decode; and every graph of the
server runs on its scheduler's thread (a second live thread running graphs slows them all: runtime/graph_threads.h).
"""
from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from conftest import random_tokens
from live_server import TIMEOUT, Server, post_json

SHORT = [random_tokens(30 + 11 * i, seed=40 + i) for i in range(3)]
LONG = random_tokens(1200, seed=43)
N_PREDICT = 48
SAMPLING = {"greedy": {"temperature": 0}, "seeded": {"temperature": 0.9, "seed": 7}}


@pytest.fixture(scope="module")
def server(predictable_gguf, tmp_path_factory):
    log = tmp_path_factory.mktemp("concurrency") / "server.log"
    # fixed draft lengths: adaptive ones follow the machine's timings, so draft_n would too; two CPU threads: OpenMP
    # teams (the engine warns when a second live thread runs graphs with one)
    s = Server(predictable_gguf, log, "-t", "2", "-np", "4", "--spec-type", "draft-mtp", "--spec-draft-adaptive", "off",
               "-b", "256", "-ub", "256", n_ctx=4 * 2048)
    yield s
    s.stop()


def complete(server: Server, prompt: list[int], sampling: dict) -> tuple:
    status, body = post_json(server, "/completion", {"prompt": prompt, "n_predict": N_PREDICT, "ignore_eos": True,
                                                     "cache_prompt": False, "return_tokens": True, **sampling})
    assert status == 200, body
    return body["tokens"], body["timings"]["draft_n"], body["timings"]["draft_n_accepted"]


def first_chunk_then_rest(server: Server, prompt: list[int], sampling: dict, started: threading.Event) -> tuple:
    """A streamed request: `started` is set at its first chunk (the request is decoding); returns what complete()
    returns, from the chunks and the final one."""
    body = json.dumps({"prompt": prompt, "n_predict": N_PREDICT, "ignore_eos": True, "cache_prompt": False,
                       "stream": True, **sampling}).encode()
    req = urllib.request.Request(server.url + "/completion", body, {"Content-Type": "application/json"})
    tokens, last = [], {}
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        for line in r:
            if not line.startswith(b"data: "):
                continue
            last = json.loads(line[6:])
            tokens += last.get("tokens", [])
            started.set()
    return tokens, last["timings"]["draft_n"], last["timings"]["draft_n_accepted"]


@pytest.mark.parametrize("sampling", sorted(SAMPLING))
def test_concurrent_requests_equal_their_runs_alone(server, sampling):
    kwargs = SAMPLING[sampling]
    want = [complete(server, p, kwargs) for p in SHORT + [LONG]]
    assert all(draft_n > 0 for _, draft_n, _ in want)

    got: dict[int, tuple] = {}
    started = threading.Event()

    def run(i: int) -> None:
        got[i] = first_chunk_then_rest(server, SHORT[i], kwargs, started) if i == 0 else complete(server, SHORT[i], kwargs)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(SHORT))]
    for t in threads:
        t.start()
    assert started.wait(TIMEOUT)  # the short ones decode: the long prompt arrives between their steps
    got[len(SHORT)] = complete(server, LONG, kwargs)
    for t in threads:
        t.join(TIMEOUT)
    assert [got[i] for i in range(len(SHORT) + 1)] == want


def test_graphs_run_on_the_scheduler_thread_only(server):
    # requests that reuse and save cached prompts (the prompt cache works on the request's worker thread)
    for prompt in (SHORT[0], SHORT[0] + SHORT[1], SHORT[2]):
        status, body = post_json(server, "/completion", {"prompt": prompt, "n_predict": 4, "cache_prompt": True})
        assert status == 200, body
    assert "ggml graphs now run on" not in server.log.read_text()
