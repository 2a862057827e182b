"""N concurrent clients on -np N (issue 24's measure): glm5next-server against llama-server, same file, same threads,
in one run. Each client sends a distinct prompt (~500 characters of this repository's code) and asks for 128 greedy
tokens with ignore_eos; a run's aggregate is all clients' generated tokens over the wall time from the first request
to the last response. For each client count every server is started (-np N), warmed up by a request per slot, and
their runs alternate server by server, so that the machine's drift (2-3x over minutes on a shared machine) hits all
alike: each row reports the median of each server's runs and the median ratio of runs taken side by side (ours
against llama-server, and draft-MTP against plain decoding on ours). With N > 1 clients each server also serves one
client alone next to each of its N-client runs (first or second in turn), and the row reports the median ratio of
those pairs: what N clients get against one client alone, measured on the same server minutes apart at most (rows of
different N are measured minutes apart, and the machine's drift between them can exceed the gap).

    .venv/bin/python scripts/bench_concurrency.py -m FILE.gguf --llama-server PATH/llama-server [-np 1,2,4,8] [-t 2]
        [-n 128] [--runs 3] [--spec none,draft-mtp]

llama-server: built from the sources llama-cpp-python 0.3.36 vendors (vendor/llama.cpp in its sdist; cmake
--target llama-server). Without --llama-server only glm5next-server's rows are measured. The file must be converted
with --arch glm5-next for llama-server to load it.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "glm5next_runtime").rglob("*.py"))


def prompts(n: int, chars: int) -> list[str]:
    """n distinct prompts of about `chars` characters (the openings of this repository's Python files)."""
    texts = [p.read_text()[:chars] for p in SOURCES if len(p.read_text()) >= chars]
    if len(texts) < n:
        raise SystemExit(f"only {len(texts)} source files of {chars} characters for {n} clients")
    return texts[:n]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{argv[0]} exited ({proc.returncode}): {' '.join(argv)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{argv[0]} did not come up on port {port}")


def complete(port: int, prompt: str, n_gen: int) -> dict:
    body = json.dumps({"prompt": prompt, "n_predict": n_gen, "temperature": 0, "ignore_eos": True,
                       "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def clients(port: int, texts: list[str], n_gen: int) -> tuple[float, list[dict]]:
    """All texts at once, one client thread each: (aggregate generated tokens per second, the responses)."""
    with ThreadPoolExecutor(len(texts)) as pool:
        t0 = time.perf_counter()
        out = list(pool.map(lambda t: complete(port, t, n_gen), texts))
        wall = time.perf_counter() - t0
    return sum(r["tokens_predicted"] for r in out) / wall, out


def server_argv(kind: str, args: argparse.Namespace, n: int, port: int) -> list[str]:
    common = ["-m", str(args.model), "-np", str(n), "-t", str(args.threads), "-c", str(args.ctx * n),
              "--port", str(port), "--host", "127.0.0.1"]
    if kind == "llama-server":
        return [str(args.llama_server), *common, "-b", "512", "-ub", "512"]
    spec = kind.split(":", 1)[1]
    extra = ["--spec-type", spec] + (["--spec-draft-adaptive", "on"] if spec != "none" else [])
    return [str(ROOT / ".venv" / "bin" / "glm5next-server"), *common, *extra]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", type=Path, required=True)
    p.add_argument("--llama-server", type=Path)
    p.add_argument("-np", default="1,2,4,8", help="client counts (default 1,2,4,8)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("-c", "--ctx", type=int, default=2048, help="context per slot (default 2048)")
    p.add_argument("--chars", type=int, default=500, help="prompt characters (default 500)")
    p.add_argument("--runs", type=int, default=3, help="runs per row (median; default 3)")
    p.add_argument("--spec", default="none,draft-mtp", help="glm5next-server's --spec-type values (default both)")
    args = p.parse_args()
    kinds = [f"glm5next:{s}" for s in args.spec.split(",")] + (["llama-server"] if args.llama_server else [])
    table: dict[tuple[str, int], list[float]] = {}
    alone: dict[tuple[str, int], list[float]] = {}  # (kind, N): one client's runs on the -np N server, paired
    for n in [int(x) for x in args.np.split(",")]:
        texts = prompts(n, args.chars)
        procs, ports = [], {}
        try:
            for kind in kinds:
                ports[kind] = free_port()
                procs.append(start(server_argv(kind, args, n, ports[kind]), ports[kind]))
                clients(ports[kind], texts, 8)  # warm-up: every slot once
            for run in range(args.runs):
                for kind in kinds:
                    pair = [(table, texts), (alone, texts[:1])] if n > 1 else [(table, texts)]
                    for runs_of, sent in pair if run % 2 == 0 else pair[::-1]:  # one client first in every other
                        runs_of.setdefault((kind, n), []).append(clients(ports[kind], sent, args.n_gen)[0])
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)
        for kind in kinds:
            runs = table[kind, n]
            one = f"; one client alone {[round(r, 1) for r in alone[kind, n]]}" if n > 1 else ""
            print(f"-np {n} {kind:18s} {statistics.median(runs):8.1f} tok/s  runs {[round(r, 1) for r in runs]}{one}",
                  flush=True)
    ns = sorted({n for _, n in table})
    ours = [k for k in kinds if k != "llama-server"]
    # side-by-side ratios (the median of runs taken in turn): ours against llama-server, and draft-MTP against plain
    # decoding on our server, whose gap is smaller than the drift between runs
    pairs = [(k, "llama-server") for k in ours if args.llama_server]
    pairs += [(k, "glm5next:none") for k in ours if k != "glm5next:none" and "glm5next:none" in kinds]
    print("\n| clients | " + " | ".join(f"{k} tok/s" for k in kinds) + "".join(f" | {a} / {b}" for a, b in pairs)
          + "".join(f" | {k}: N / 1 client" for k in kinds) + " |")
    print("|---:|" + "---:|" * (2 * len(kinds) + len(pairs)))
    for n in ns:
        cells = [f"{statistics.median(table[k, n]):.1f}" for k in kinds]
        cells += [f"{statistics.median(x / y for x, y in zip(table[a, n], table[b, n])):.2f}x" for a, b in pairs]
        cells += [f"{statistics.median(x / y for x, y in zip(table[k, n], alone[k, n])):.2f}x" if n > 1 else ""
                  for k in kinds]
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
