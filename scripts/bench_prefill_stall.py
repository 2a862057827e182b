"""How long a prompt stalls the other slots' streams (issue 24): glm5next-server -np N, N-1 clients streaming greedy
tokens, then one client sends a long prompt (default 2,000 tokens); the inter-token gaps of the running streams are
taken before the long prompt arrives and while it is prefilled (until its first token), and set beside the time of
one prompt ubatch of -ub rows alone (measured first, on the same server). With the prompt prefilled in ubatches
between the others' decode steps, a gap during the prefill is about one decode step plus one ubatch; evaluated
whole, it would be the whole prompt's time.

    .venv/bin/python scripts/bench_prefill_stall.py -m FILE.gguf [-np 4] [-t 2] [--prompt 2000] [-ub 512]
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from pathlib import Path

from bench_concurrency import free_port, prompts, start

ROOT = Path(__file__).resolve().parents[1]


def stream_gaps(port: int, text: str, n_gen: int, arrivals: list[float]) -> None:
    """Stream a completion of `text`, appending each chunk's arrival time (perf_counter) to `arrivals`."""
    body = json.dumps({"prompt": text, "n_predict": n_gen, "temperature": 0, "ignore_eos": True, "stream": True,
                       "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: "):
                arrivals.append(time.perf_counter())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", type=Path, required=True)
    p.add_argument("-np", type=int, default=4)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-ub", type=int, default=512)
    p.add_argument("--prompt", type=int, default=2000, help="the long prompt's tokens (default 2000)")
    p.add_argument("-n", "--n-gen", type=int, default=256, help="tokens each running stream asks for")
    args = p.parse_args()
    port = free_port()
    argv = [str(ROOT / ".venv" / "bin" / "glm5next-server"), "-m", str(args.model), "-np", str(args.np), "-t",
            str(args.threads), "-c", str(args.np * (args.prompt + 512)), "-b", str(args.ub), "-ub", str(args.ub),
            "--port", str(port), "--spec-type", "none"]
    proc = start(argv, port)
    try:
        long_ids = list(range(10, 10 + args.prompt))  # the ids themselves do not matter to the timing
        alone = statistics.median(complete_ids(port, long_ids)["timings"]["prompt_ms"] for _ in range(3))
        n_ubatches = -(-args.prompt // args.ub)
        texts = prompts(args.np - 1, 400)
        arrivals = [[] for _ in texts]
        threads = [threading.Thread(target=stream_gaps, args=(port, t, args.n_gen, a)) for t, a in zip(texts, arrivals)]
        for t in threads:
            t.start()
        while min(len(a) for a in arrivals) < 20:  # all decoding
            time.sleep(0.01)
        t_send = time.perf_counter()
        out = complete_ids(port, long_ids)
        t_first = t_send + out["timings"]["prompt_ms"] / 1e3
        for t in threads:
            t.join()
    finally:
        proc.terminate()
        proc.wait(30)

    def gaps(lo: float, hi: float) -> list[float]:
        return [(b - a) * 1e3 for a_list in arrivals for a, b in zip(a_list, a_list[1:]) if lo <= b <= hi]

    before, during = gaps(0, t_send), gaps(t_send, t_first)
    print(f"the long prompt alone: {alone:.0f} ms in {n_ubatches} ubatches of <= {args.ub} rows, "
          f"{alone / n_ubatches:.1f} ms per ubatch")
    print(f"inter-token gaps of the {len(texts)} running streams: before the long prompt median "
          f"{statistics.median(before):.1f} ms, max {max(before):.1f}; while its {args.prompt} tokens were prefilled "
          f"({out['timings']['prompt_ms']:.0f} ms): median {statistics.median(during):.1f} ms, max {max(during):.1f}")


def complete_ids(port: int, ids: list[int]) -> dict:
    body = json.dumps({"prompt": ids, "n_predict": 1, "temperature": 0, "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


if __name__ == "__main__":
    main()
