#!/usr/bin/env python3
"""Default draft-MTP against plain decoding as a fresh process meets it (issue 28): every repetition is a new
process that loads the model (default settings: adaptive draft lengths, n_max 3) and, for each prompt in turn,
generates --n-gen greedy tokens without drafts and with the default, in alternating order (cache_prompt off, so
that neither reuses the other's prompt). Its first requests are counted: what a one-shot glm5next-cli run, a short
script or a freshly started server pays. Prints per process the ratio plain time / default time over its prompts,
their geometric mean with its standard error, the load time and whether the outputs were identical.

    python scripts/bench_fresh_process.py -m model.gguf -t 1 -r 6 [-d 384] [-n 128] a.py b.py ...
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

from glm5next_runtime import bench

CHILD = """
import json, sys, time
from glm5next_runtime import Model
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
m = Model(args["model"], n_ctx=args["depth"] + args["n_gen"] + 8, n_threads=args["threads"])
load_s = time.perf_counter() - t0
prompts = [m.tokenize(open(f).read(), parse_special=False)[:args["depth"]] for f in args["files"]]
plain = auto = 0.0
same = True
for i, p in enumerate(prompts):
    runs = {}
    for kind in (("plain", "auto") if i % 2 == 0 else ("auto", "plain")):
        t = time.perf_counter()
        r = m.generate(p, max_tokens=args["n_gen"], temperature=0, stop=None, cache_prompt=False,
                       spec_n_max=0 if kind == "plain" else None)
        runs[kind] = (time.perf_counter() - t, r.tokens, r.metrics.get("n_drafted", 0))
    plain += runs["plain"][0]
    auto += runs["auto"][0]
    same &= runs["plain"][1] == runs["auto"][1]
print(json.dumps({"plain": plain, "auto": auto, "same": same, "load_s": load_s}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", type=Path, required=True)
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("-r", "--repetitions", type=int, default=6, help="fresh processes")
    p.add_argument("-d", "--depth", type=int, default=384, help="prompt tokens taken from each file")
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("files", type=Path, nargs="+", help="text files (held-out code)")
    a = p.parse_args()
    args = {"model": str(a.model), "threads": a.threads, "depth": a.depth, "n_gen": a.n_gen,
            "files": [str(f) for f in a.files]}
    logs = []
    for i in range(a.repetitions):
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        logs.append(math.log(r["plain"] / r["auto"]))
        print(f"process {i + 1}: default {r['plain'] / r['auto']:.3f}x plain decoding, outputs identical: "
              f"{r['same']}, load {r['load_s'] * 1e3:.0f} ms", flush=True)
    r = bench.paired_speedup(logs)
    print(f"{a.model.name}, -t {a.threads}, d{a.depth} tg{a.n_gen}, {len(a.files)} prompts per process, "
          f"{len(logs)} processes: default {r['speedup']:.3f}x plain decoding (+- {r['speedup_se']:.3f})")


if __name__ == "__main__":
    main()
