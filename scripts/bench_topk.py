#!/usr/bin/env python3
"""What the sparse indexer's top-k buys and costs (issue 52): `--override-kv glm5next.attention.indexer.top_k=int:K`
at the file's top-k and 1/2, 1/4, 1/8 of it.

Speed, on the real-widths preset (GLM-5.3-Flash's attention and indexer widths: top-k 2048, kpool 4; a q8_0 file made
here unless --speed-model is given), for glm5next and llama-cpp-python with the same override, same file and
threads: at each depth (prefilled once per engine and top-k, untimed, then restored from a saved state before every
repetition) a prompt chunk's prefill t/s and decode t/s, repetitions interleaved between the engines, medians.

Quality, on the bundled trained model (models/glm5next-small: top-k 128, so depths past 128 tokens are sparse), over
held-out stdlib code (scripts/train/data.py, never trained on): the perplexity by position bucket at each top-k, the
mean KL divergence of its next-token distribution from the file's top-k, and greedy draft-MTP's mean accepted length
per round (3 drafts) with index sharing on and off.

    python scripts/bench_topk.py [--depths 4096,16384,32768] [--fractions 1,2,4,8] [-p 512] [-n 32] [-r 3] [-t 2]
                                 [--skip-speed] [--skip-quality] [--json FILE]

Prints markdown tables (the README's "Tuning the indexer's top-k" comes from one run); --json also writes the figures.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from make_checkpoint import make_checkpoint
from tokenizers import Tokenizer
from train import data

from glm5next_convert import convert
from glm5next_runtime import _core
from glm5next_runtime.bench.runners import LlamaCppRunner, OursRunner, llama_kv_overrides

ROOT = Path(__file__).resolve().parent.parent
TOP_K_KEY = "glm5next.attention.indexer.top_k"


def _ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def top_ks(default: int, kpool: int, fractions: list[int]) -> list[int]:
    """The file's top-k divided by each fraction, rounded down to whole pools (the loader's rule: kpool divides it)."""
    return list(dict.fromkeys(max(kpool, default // f // kpool * kpool) for f in fractions))


# ------------------------------------------------------------------------------------------------------- speed

class _Saved:
    """An engine holding a sequence at a depth it can go back to (its save_state / load_state)."""

    def __init__(self, runner: OursRunner | LlamaCppRunner):
        self.runner, self.key, self.state, self.depth = runner, runner.key, None, 0

    def extend_to(self, tokens: list[int]) -> None:
        """Prefill (untimed) from the saved depth to len(tokens), then save there."""
        if self.state is not None:
            self._restore()
        else:
            self.runner.reset()
        self.runner.eval(tokens[self.depth:])
        self.depth = len(tokens)
        self.state = (self.runner.model.save_state() if isinstance(self.runner, OursRunner)
                      else self.runner.llm.save_state())

    def _restore(self) -> None:
        if isinstance(self.runner, OursRunner):
            self.runner.model.load_state(self.state)
        else:
            self.runner.llm.load_state(self.state)

    def time_prefill(self, prompt: list[int]) -> float:
        self._restore()
        t0 = time.perf_counter()
        self.runner.eval(prompt)
        return len(prompt) / (time.perf_counter() - t0)

    def time_decode(self, tokens: list[int]) -> float:
        self._restore()
        spent = 0.0
        for t in tokens:
            t0 = time.perf_counter()
            self.runner.eval([t])
            spent += time.perf_counter() - t0
        return len(tokens) / spent


def speed(path: Path, fractions: list[int], depths: list[int], n_prompt: int, n_gen: int, reps: int,
          threads: int) -> list[dict]:
    n_ctx = max(depths) + max(n_prompt, n_gen) + 16
    rng = np.random.default_rng(0)
    hp = _core.read_hparams(str(path))
    n_vocab = hp["n_vocab"]
    depth_tokens = rng.integers(16, n_vocab, max(depths)).tolist()
    prompt, gen = rng.integers(16, n_vocab, n_prompt).tolist(), rng.integers(16, n_vocab, n_gen).tolist()
    rows = []
    for k in top_ks(hp["idx_top_k"], hp["idx_kpool"], fractions):
        override = [f"{TOP_K_KEY}=int:{k}"]
        ours = OursRunner(path, n_ctx, threads, n_prompt, warmup=False, cache_type_k="f16", override_kv=override)
        llama = LlamaCppRunner(path, n_ctx, threads, n_prompt, kv_overrides=llama_kv_overrides(ours.model.kv_overrides))
        engines = [_Saved(ours), _Saved(llama)]
        for depth in sorted(depths):
            t0 = time.perf_counter()
            for e in engines:
                e.extend_to(depth_tokens[:depth])
            pp: dict[str, list[float]] = {e.key: [] for e in engines}
            tg: dict[str, list[float]] = {e.key: [] for e in engines}
            for _ in range(reps + 1):  # the first: a warm-up
                for e in engines:
                    pp[e.key].append(e.time_prefill(prompt))
                for e in engines:
                    tg[e.key].append(e.time_decode(gen))
            row = {"top_k": k, "depth": depth, **{f"pp_{key}": statistics.median(v[1:]) for key, v in pp.items()},
                   **{f"tg_{key}": statistics.median(v[1:]) for key, v in tg.items()}}
            rows.append(row)
            print(f"top-k {k} @ d{depth}: {json.dumps({a: round(b, 2) for a, b in row.items()})} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        llama.llm.close()
        del ours, llama, engines
    return rows


def speed_md(rows: list[dict]) -> str:
    base = {r["depth"]: r for r in rows if r["top_k"] == rows[0]["top_k"]}
    out = ["| top-k | depth | pp t/s | llama.cpp pp t/s | ratio | tg t/s | llama.cpp tg t/s | ratio | tg vs file's "
           "top-k | llama.cpp tg vs file's |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        b = base[r["depth"]]
        out.append(f"| {r['top_k']} | {r['depth']} | {r['pp_glm5next']:.1f} | {r['pp_llama_cpp']:.1f} | "
                   f"{r['pp_glm5next'] / r['pp_llama_cpp']:.2f} | {r['tg_glm5next']:.2f} | {r['tg_llama_cpp']:.2f} | "
                   f"{r['tg_glm5next'] / r['tg_llama_cpp']:.2f} | {r['tg_glm5next'] / b['tg_glm5next']:.3f} | "
                   f"{r['tg_llama_cpp'] / b['tg_llama_cpp']:.3f} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------- quality

def heldout_tokens(tokenizer: Tokenizer, n: int) -> list[int]:
    """The held-out stdlib files' tokens, concatenated in path order, the first n."""
    _, held = data.split(data.stdlib_sources())
    out: list[int] = []
    for text in data.read_texts(held):
        out += tokenizer.encode(text).ids
        if len(out) >= n:
            return out[:n]
    raise SystemExit(f"the held-out files have only {len(out)} tokens; ask for fewer")


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def quality(checkpoint: Path, fractions: list[int], n_windows: int, window: int, buckets: list[int],
            n_prompts: int, prompt_len: int, n_gen: int, threads: int, tmp: Path) -> list[dict]:
    path = tmp / "bundled-f32.gguf"
    convert(checkpoint, path, outtype="f32")
    tokens = heldout_tokens(Tokenizer.from_file(str(checkpoint / "tokenizer.json")),
                            n_windows * window + n_prompts * prompt_len)
    windows = [tokens[i * window:(i + 1) * window] for i in range(n_windows)]
    prompts = [tokens[n_windows * window + i * prompt_len:][:prompt_len] for i in range(n_prompts)]
    edges = [0, *(b for b in buckets if 0 < b < window), window]
    rows, reference = [], None
    hp = _core.read_hparams(str(path))
    for k in top_ks(hp["idx_top_k"], hp["idx_kpool"], fractions):
        ours = OursRunner(path, window + prompt_len + n_gen + 8, threads, 512, cache_type_k="f32", warmup=False,
                          override_kv=[f"{TOP_K_KEY}=int:{k}"])
        logp = []
        for w in windows:
            ours.reset()
            logp.append(_log_softmax(ours.model.eval(w, logits_all=True)[:-1]))  # row i predicts token i + 1
        reference = reference or logp
        row: dict = {"top_k": k}
        for lo, hi in zip(edges, edges[1:]):
            nll = [-lp[np.arange(lo, hi - 1), np.array(w[lo + 1:hi])].mean() for lp, w in zip(logp, windows)]
            kl = [(np.exp(r[lo:hi - 1]) * (r[lo:hi - 1] - lp[lo:hi - 1])).sum(-1).mean()
                  for r, lp in zip(reference, logp)]
            row[f"ppl {lo}-{hi}"] = float(np.exp(np.mean(nll)))
            row[f"kl {lo}-{hi}"] = float(np.mean(kl))
        for share in ("on", "off"):
            lens = [ours.spec_decode(p, n_gen, 3, None, share, "auto")[2]["mean_accepted_length"] for p in prompts]
            row[f"accepted share {share}"] = float(np.mean(lens))
        rows.append(row)
        print(f"top-k {k}: {json.dumps({a: round(b, 4) for a, b in row.items()})}", flush=True)
    return rows


def quality_md(rows: list[dict]) -> str:
    cols = [c for c in rows[0] if c != "top_k"]
    out = ["| top-k | " + " | ".join(c.replace("ppl ", "ppl @ ").replace("kl ", "KL @ ") for c in cols) + " |",
           "| ---: |" + " ---: |" * len(cols)]
    for r in rows:
        out.append(f"| {r['top_k']} | " + " | ".join(f"{r[c]:.4f}" if c.startswith("kl") else f"{r[c]:.3f}"
                                                     for c in cols) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--speed-model", type=Path, help="the speed rows' file (default: the real-widths preset as q8_0, "
                                                    "--arch glm5-next, made in a temporary directory)")
    p.add_argument("--depths", type=_ints, default=[4096, 16384, 32768], help="speed rows' depths (4096,16384,32768)")
    p.add_argument("--fractions", type=_ints, default=[1, 2, 4, 8], help="top-k = the file's / each (1,2,4,8)")
    p.add_argument("-p", "--n-prompt", type=int, default=512, help="prefill rows' chunk (512; also the ubatch)")
    p.add_argument("-n", "--n-gen", type=int, default=32, help="decode rows' tokens (32)")
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--checkpoint", type=Path, default=ROOT / "models" / "glm5next-small",
                   help="the quality rows' trained checkpoint (models/glm5next-small)")
    p.add_argument("--windows", type=int, default=4, help="held-out windows for perplexity and KL (4)")
    p.add_argument("--window", type=int, default=1024, help="tokens per window (1024)")
    p.add_argument("--buckets", type=_ints, default=[128, 512], help="position bucket edges inside a window")
    p.add_argument("--prompts", type=int, default=4, help="held-out prompts for the acceptance (4)")
    p.add_argument("--prompt-len", type=int, default=768, help="their length in tokens (768)")
    p.add_argument("--accept-gen", type=int, default=64, help="tokens generated per prompt for the acceptance (64)")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args(argv)
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        if not a.skip_quality:
            report["quality"] = quality(a.checkpoint, a.fractions, a.windows, a.window, a.buckets, a.prompts,
                                        a.prompt_len, a.accept_gen, a.threads, Path(tmp))
            print("\nquality (bundled model, f32, held-out code): perplexity by position, KL from the file's top-k "
                  "(nats per token), draft-MTP mean accepted length (3 drafts, greedy)\n")
            print(quality_md(report["quality"]), flush=True)
        if not a.skip_speed:
            path = a.speed_model
            if path is None:
                ckpt = make_checkpoint(Path(tmp) / "real-widths", "real-widths", vision=False)
                path = Path(tmp) / "real-widths-q8_0.gguf"
                convert(ckpt, path, outtype="q8_0", arch="glm5-next")
            report["speed"] = speed(path, a.fractions, a.depths, a.n_prompt, a.n_gen, a.repetitions, a.threads)
            print(f"\nspeed ({path.name}, -t {a.threads}, pp{a.n_prompt} and tg{a.n_gen} at each depth, medians of "
                  f"{a.repetitions})\n")
            print(speed_md(report["speed"]))
    if a.json:
        a.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
