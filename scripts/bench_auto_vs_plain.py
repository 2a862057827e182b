#!/usr/bin/env python3
"""Default draft-MTP (adaptive lengths) against plain decoding, with the noise floor measured in the same run
(issue 15: "never below 0.98x plain decoding").

Each triplet on one prompt runs plain decoding, then the default (adaptive, at most --n-max drafts), then plain
decoding again, greedy, --n-gen tokens each. It prints the geometric mean over triplets of plain/auto time (the
mean of the two plain runs against the auto run) and, as the noise floor, of the first plain run against the second:
on this shared machine identical work reads +-4% at one or two standard errors. The draft length policy is warmed
first by --warmup adaptive generations (a server slot learns once, not per request); whether it still drafts at the
end is printed.

    python scripts/bench_auto_vs_plain.py -m model.gguf -t 1 -r 20 [-d 256] [-n 128] a.py b.py ...
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from glm5next_runtime import bench
from glm5next_runtime.model import DRAFT_N_MAX


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", type=Path, required=True)
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("-r", "--repetitions", type=int, default=20, help="triplets per prompt")
    p.add_argument("-d", "--depth", type=int, default=256, help="prompt tokens taken from each file")
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("--n-max", type=int, default=DRAFT_N_MAX)
    p.add_argument("--warmup", type=int, default=2, help="adaptive generations before the triplets")
    p.add_argument("prompts", type=Path, nargs="+", help="text files (held-out code)")
    a = p.parse_args()

    ours = bench.OursRunner(a.model, n_ctx=a.depth + a.n_gen + 8, n_threads=a.threads, n_batch=512)
    prompts = [ours.model.tokenize(f.read_text(), parse_special=False)[:a.depth] for f in a.prompts]

    def seconds(prompt: list[int], adaptive: bool) -> tuple[float, dict]:
        _, s, stats = ours.spec_decode(prompt, a.n_gen, a.n_max if adaptive else 0, None, "auto", "auto", adaptive)
        return s, stats

    for i in range(a.warmup):
        seconds(prompts[i % len(prompts)], True)
    auto, floor, drafted = [], [], 0
    for _ in range(a.repetitions):
        for prompt in prompts:
            first, _ = seconds(prompt, False)
            adaptive, stats = seconds(prompt, True)
            second, _ = seconds(prompt, False)
            auto.append(math.log((first + second) / 2 / adaptive))
            floor.append(math.log(first / second))
            drafted += stats["n_drafted"]
    policy = ours.model.generator(temperature=0, n_max=a.n_max).policy
    print(f"{a.model.name}, -t {a.threads}, d{a.depth} tg{a.n_gen}, n_max {a.n_max} ({len(auto)} triplets)")
    for name, logs in (("auto against plain decoding", auto), ("plain against plain (noise)", floor)):
        r = bench.paired_speedup(logs)
        print(f"{name}: {r['speedup']:.3f} +- {r['speedup_se']:.3f}")
    print(f"drafts per generation: {drafted / len(auto):.1f}; the policy can pay at the end: {policy.can_pay()}")


if __name__ == "__main__":
    main()
