#!/usr/bin/env python3
"""Is the first request after load as fast as the later ones? (issue 51: llama.cpp prefetches the mapping and
warms up; a first request that faults the file in, or builds every graph, pays for it.)

Each configuration runs in a fresh process: load the model (timed), then `--requests` generations of the same shape
(a prompt of `--prompt-tokens` random tokens, each request's own so that no prompt cache serves it, then `-n`
tokens, greedy), each timed. Prints per configuration the load time, every request's time and the first request's
time over the last's.

    python scripts/bench_first_request.py MODEL.gguf [-t 2] [--prompt-tokens 512] [-n 32] [--requests 3] [--cold]

--cold drops the page cache before each configuration (root: /proc/sys/vm/drop_caches), so that the load reads
the file from the disk as after a reboot.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CONFIGS = {  # name -> Model keywords
    "mmap (default)": {},
    "--no-mmap": {"use_mmap": False},
    "--no-warmup": {"warmup": False},
    "--spec-type none": {"spec_type": "none"},
}


def one_process(path: str, threads: int, n_prompt: int, n_gen: int, requests: int, kwargs: dict) -> dict:
    """Load and time `requests` generations in this process."""
    import numpy as np

    from glm5next_runtime import Model
    t0 = time.perf_counter()
    m = Model(path, n_ctx=n_prompt + n_gen + 8, n_threads=threads, **kwargs)
    load = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    times = []
    for _ in range(requests):
        prompt = rng.integers(16, m.n_vocab, n_prompt).tolist()
        t0 = time.perf_counter()
        m.generate(prompt, max_tokens=n_gen, temperature=0, cache_prompt=False)
        times.append(time.perf_counter() - t0)
        m.reset()
    return {"load_s": load, "request_s": times}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("-n", "--n-gen", type=int, default=32)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="drop the page cache before each configuration (root)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # a configuration's JSON keywords: run it here
    a = p.parse_args(argv)
    if a.child is not None:
        print(json.dumps(one_process(a.model, a.threads, a.prompt_tokens, a.n_gen, a.requests, json.loads(a.child))))
        return 0
    print(f"{a.model}: -t {a.threads}, prompts of {a.prompt_tokens} tokens, {a.n_gen} generated, greedy"
          f"{', page cache dropped before each load' if a.cold else ''}\n")
    print("| configuration | load s | " + " | ".join(f"request {i + 1} s" for i in range(a.requests))
          + " | first / last |")
    print("|---|---:|" + "---:|" * a.requests + "---:|")
    for name, kwargs in CONFIGS.items():
        if a.cold:
            subprocess.run(["sync"], check=True)
            with open("/proc/sys/vm/drop_caches", "w") as f:  # PermissionError unless root
                f.write("1\n")
        out = subprocess.run([sys.executable, __file__, a.model, "-t", str(a.threads), "--prompt-tokens",
                              str(a.prompt_tokens), "-n", str(a.n_gen), "--requests", str(a.requests),
                              "--child", json.dumps(kwargs)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        req = r["request_s"]
        print(f"| {name} | {r['load_s']:.2f} | " + " | ".join(f"{s:.2f}" for s in req)
              + f" | {req[0] / req[-1]:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
