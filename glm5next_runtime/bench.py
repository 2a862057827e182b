"""glm5next-bench: llama-bench style throughput of the runtime, optionally side by side with llama-cpp-python.

    glm5next-bench -m FILE [-p 512] [-n 128] [-d 0,1024] [-t THREADS] [-b 512] [-r 3] [--llama-cpp] [-o md|csv|json]

Tests (llama-bench meaning):
  pp N @ dD  time to evaluate an N-token prompt on top of a D-token sequence (the D-token prefill is not timed)
  tg N @ dD  time to generate N tokens one eval call at a time after a D-token prefill; only the eval calls are
             timed. The fed tokens are a fixed pseudo-random sequence (llama-bench's way; identical for every
             engine and repetition) or, with --tg-tokens argmax, each step's greedy token.
Every test is run -r times per engine; the table gives the median t/s +- its stdev (json/csv add min, max and the
samples). With --llama-cpp the same rows run on llama-cpp-python over the same file and threads in the same
process, interleaved repetition by repetition (ours, then upstream) so machine noise hits both alike, and a ratio
column (ours / upstream, of the medians) is added.

Resident memory (Linux /proc/self/status) is reported after each engine's load and first eval: the weights are
memory-mapped, so RssAnon growth should be caches and compute buffers only, never a copy of the file.

Rows are a list of Row(name, run, params): `run(runner)` performs one timed repetition on a Runner and returns
(tokens, seconds).

Speculative rows (--spec-n-max, ours only: upstream has no draft-MTP for this model) time tg N through the
draft-MTP rounds, next to the same rounds without drafts, for each n_max, index-sharing setting and draft type
(an n_max drafts that many every round; `auto` or `autoN` drafts what the draft length policy chooses each round,
at most 3 or N: the default, --spec-draft-adaptive on; "rounds by length" counts its choices);
--spec-accept L fixes the mean accepted length per round (synthetic acceptance, runtime.md) so that speed can be
compared at a given acceptance whatever the weights. --spec-prompts FILE... runs them on real text instead: each
file's first D tokens (D from -d) are a prompt, the rounds generate N tokens greedily after each, and a row sums
its time and acceptance over all the prompts. Their speedup is the geometric mean, over prompts and repetitions, of
the time ratio of a prompt's rounds without drafts and then with, run back to back, ± its standard error.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from .stderr_capture import captured_stderr
from .tokenizer import NORMAL

PROG = "glm5next-bench"
OURS = "glm5next"
UPSTREAM = "llama_cpp"


class BenchError(Exception):
    """Bad input or an unusable file: reported as `glm5next-bench: error: ...`, exit status 2."""


# ---------------------------------------------------------------------------------------------------- runners

class Runner(Protocol):
    """One engine holding one sequence. `eval` is the only thing rows time."""

    key: str

    def reset(self) -> None: ...

    def eval(self, tokens: Sequence[int]) -> None:
        """Append `tokens` to the sequence and run the model over them (prefill in n_batch ubatches)."""

    def argmax(self) -> int:
        """Greedy next token after the last eval."""


class OursRunner:
    key = OURS

    def __init__(self, path: Path, n_ctx: int, n_threads: int, n_batch: int, **placement):
        """placement: Model's rpc / n_gpu_layers / cpu_moe (the bench's --rpc, -ngl, --cpu-moe)."""
        from .model import Model
        self._load = partial(Model, path, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch, **placement)
        self.model = self._load()
        self._logits: np.ndarray | None = None
        # draft type -> a model whose draft layer has that type: requantizing is done once, at its load, and a
        # second Model is cheap (the weights are memory-mapped)
        self._by_draft_type = {"auto": self.model}

    def reset(self) -> None:
        self.model.reset()
        self._logits = None

    def eval(self, tokens: Sequence[int]) -> None:
        self._logits = self.model.eval(tokens)

    def argmax(self) -> int:
        assert self._logits is not None, "argmax before eval"
        return int(np.argmax(self._logits))

    def spec_decode(self, prompt: Sequence[int], n_gen: int, n_max: int, accept: float | None, share: str,
                    draft_type: str, adaptive: bool = False) -> tuple[int, float, dict]:
        """Greedy generation of n_gen tokens after `prompt` (untimed) in draft-MTP rounds (n_max 0: no drafts;
        adaptive: at most n_max, as the draft length policy chooses). Returns (tokens, seconds in the rounds, the
        generator's counters)."""
        if draft_type not in self._by_draft_type:
            self._by_draft_type[draft_type] = self._load(spec_draft_type=draft_type)
        g = self._by_draft_type[draft_type].generator(
            n_max=n_max, adaptive=adaptive, temperature=0.0, seed=0, index_share=share,
            synthetic_accepted=-1.0 if accept is None else accept - 1.0)
        out = [g.start(list(prompt))]
        t0 = time.perf_counter()
        while len(out) < n_gen + 1:
            out += g.step()
        return n_gen, time.perf_counter() - t0, g.stats


class LlamaCppRunner:
    key = UPSTREAM

    def __init__(self, path: Path, n_ctx: int, n_threads: int, n_batch: int):
        from llama_cpp import Llama
        # llama.cpp logs warnings (e.g. about its V cache padding) straight to fd 2 even with verbose=False;
        # keep them out of the report, but show them if the load fails.
        with captured_stderr() as captured:
            try:
                self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                                 n_threads=n_threads, n_threads_batch=n_threads, verbose=False)
            except Exception as e:
                log = captured().strip()
                raise BenchError(f"llama-cpp-python cannot load {path}: {e}"
                                 + (f"\n{log}" if log else "")
                                 + "\n(upstream loads files converted with --arch glm5-next)") from None
        self._n_vocab = self.llm.n_vocab()

    def reset(self) -> None:
        self.llm.reset()

    def eval(self, tokens: Sequence[int]) -> None:
        self.llm.eval(tokens)

    def argmax(self) -> int:
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self._n_vocab,))
        return int(np.argmax(logits))


# ---------------------------------------------------------------------------------------------------- rows

Timing = tuple[int, float]  # (tokens processed, seconds spent in eval calls)


class Row(NamedTuple):
    """A benchmark row: `run(runner)` does one timed repetition; `params` go into csv/json (n_prompt, ...)."""
    name: str
    run: Callable[[Runner], Timing]
    params: dict[str, Any]


@dataclass(frozen=True)
class Inputs:
    """Token ids shared by every engine and repetition: depth prefill, prompt and tg inputs."""
    depth: list[int]
    prompt: list[int]
    gen: list[int]
    tg_argmax: bool


def _test_name(kind: str, n: int, depth: int) -> str:
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")


def _prefill(runner: Runner, inputs: Inputs, depth: int) -> None:
    runner.reset()
    if depth:
        runner.eval(inputs.depth[:depth])


def pp_row(n_prompt: int, depth: int, inputs: Inputs) -> Row:
    def run(runner: Runner) -> Timing:
        _prefill(runner, inputs, depth)
        t0 = time.perf_counter()
        runner.eval(inputs.prompt[:n_prompt])
        return n_prompt, time.perf_counter() - t0
    return Row(_test_name("pp", n_prompt, depth), run, {"n_prompt": n_prompt, "n_gen": 0, "n_depth": depth})


def tg_row(n_gen: int, depth: int, inputs: Inputs) -> Row:
    def run(runner: Runner) -> Timing:
        _prefill(runner, inputs, depth)
        token, spent = inputs.gen[0], 0.0
        for i in range(n_gen):
            t0 = time.perf_counter()
            runner.eval([token])
            spent += time.perf_counter() - t0
            token = runner.argmax() if inputs.tg_argmax else inputs.gen[i + 1]
        return n_gen, spent
    return Row(_test_name("tg", n_gen, depth), run, {"n_prompt": 0, "n_gen": n_gen, "n_depth": depth})


def build_rows(prompts: Sequence[int], gens: Sequence[int], depths: Sequence[int], inputs: Inputs) -> list[Row]:
    """llama-bench order: per depth, the pp rows then the tg rows (0 in -p / -n skips that kind)."""
    rows: list[Row] = []
    for d in depths:
        rows += [pp_row(p, d, inputs) for p in prompts if p > 0]
        rows += [tg_row(n, d, inputs) for n in gens if n > 0]
    return rows


# ---------------------------------------------------------------------------------------------------- stats

@dataclass
class Stats:
    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    @property
    def tps(self) -> list[float]:
        return [n / s for n, s in zip(self.tokens, self.seconds)]

    def summary(self) -> dict[str, Any]:
        tps = self.tps
        return {"tps_median": statistics.median(tps), "tps_mean": statistics.fmean(tps),
                "tps_stdev": statistics.stdev(tps) if len(tps) > 1 else 0.0,
                "tps_min": min(tps), "tps_max": max(tps), "tps_samples": tps, "seconds": list(self.seconds)}


# ---------------------------------------------------------------------------------------------------- memory

def memory_snapshot() -> dict[str, int] | None:
    """VmRSS / RssAnon / RssFile of this process in bytes (None where /proc is unavailable)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out or None


# ---------------------------------------------------------------------------------------------------- arguments

def _int_list(what: str, minimum: int) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        items = [s.strip() for s in text.split(",")]
        try:
            values = [int(s) for s in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list of integers, got {text!r}")
        if not values or any(v < minimum for v in values):
            raise argparse.ArgumentTypeError(f"{what} values must be >= {minimum}, got {text!r}")
        return list(dict.fromkeys(values))  # drop repeats, keep order
    return parse


class SpecLength(NamedTuple):
    """A --spec-n-max entry: n_max drafts every round, or adaptive lengths up to n_max (`auto`, `autoN`)."""
    n_max: int
    adaptive: bool

    def __str__(self) -> str:  # in a row's name
        return f"mtp auto{self.n_max}" if self.adaptive else f"mtp{self.n_max}"


def _spec_n_max_list(text: str) -> list[SpecLength]:
    """--spec-n-max "1,2,3,auto" -> SpecLength entries (repeats dropped). ArgumentTypeError for anything else."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        auto = item.startswith("auto")
        digits = item[4:] if auto else item
        if auto and not digits:
            from .model import DRAFT_N_MAX  # `auto`: the default upper bound, as --spec-draft-n-max
            digits = str(DRAFT_N_MAX)
        if not digits.isdigit() or int(digits) < 1:
            raise argparse.ArgumentTypeError(f"--spec-n-max takes a comma-separated list of integers >= 1, auto or "
                                             f"autoN, got {text!r}")
        out.append(SpecLength(int(digits), auto))
    return list(dict.fromkeys(out))


def _positive(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}")
        if value < 1:
            raise argparse.ArgumentTypeError(f"{what} must be >= 1, got {value}")
        return value
    return parse


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="llama-bench style pp/tg throughput of a glm5next GGUF.")
    p.add_argument("-m", "--model", required=True, type=Path, help="the .gguf file")
    p.add_argument("-p", "--n-prompt", type=_int_list("-p", 0), default=[512],
                   help="prompt lengths, comma-separated (0 = no pp rows; default 512)")
    p.add_argument("-n", "--n-gen", type=_int_list("-n", 0), default=[128],
                   help="generated tokens, comma-separated (0 = no tg rows; default 128)")
    p.add_argument("-d", "--n-depth", type=_int_list("-d", 0), default=[0],
                   help="context depths prefilled (untimed) before each test, comma-separated (default 0)")
    p.add_argument("-t", "--threads", type=_positive("-t"), default=os.cpu_count() or 1,
                   help="CPU threads (default: all cores)")
    p.add_argument("-b", "--batch-size", type=_positive("-b"), default=512,
                   help="prefill ubatch size, for both engines (default 512)")
    p.add_argument("-r", "--repetitions", type=_positive("-r"), default=3, help="runs per test (default 3)")
    p.add_argument("--rpc", metavar="HOST:PORT[,...]", help="ggml RPC servers whose devices join (as glm5next-server)")
    p.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, metavar="N",
                   help="offload the last N layers (trunk + output layer) to the first offload device (0)")
    p.add_argument("--cpu-moe", action="store_true", help="keep the routed experts on the CPU")
    p.add_argument("--llama-cpp", action="store_true",
                   help="also run every row on llama-cpp-python (same file, threads, batch), interleaved")
    p.add_argument("--tg-tokens", choices=["random", "argmax"], default="random",
                   help="tg input: a fixed pseudo-random sequence (llama-bench) or each step's argmax")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed run of each row before its repetitions")
    p.add_argument("--seed", type=int, default=0, help="seed of the token ids fed (default 0)")
    p.add_argument("-o", "--output", choices=["md", "csv", "json"], default="md", help="output format (default md)")
    p.add_argument("--spec-n-max", type=_spec_n_max_list, default=[],
                   help="draft-MTP rows: drafts per round, comma-separated; auto or autoN: adaptive draft lengths, "
                        "at most 3 or N (default: no speculative rows)")
    p.add_argument("--spec-accept", type=float, default=None, metavar="L",
                   help="synthetic acceptance: mean accepted length per round (accepted drafts + 1), e.g. 3.61")
    p.add_argument("--spec-index-share", type=_choice_list("--spec-index-share", ("auto", "on", "off")),
                   default=["auto"], help="index sharing of the draft steps, comma-separated (auto, on, off)")
    p.add_argument("--spec-draft-type", type=_choice_list("--spec-draft-type", ("auto", "q8_0", "q4_0")),
                   default=["auto"], help="draft layer types, comma-separated (auto = as stored, q8_0, q4_0)")
    p.add_argument("-npl", type=_int_list("-npl", 1), default=[], metavar="B,...",
                   help="llama-batched-bench's table instead: B sequences at once, each -npp prompt tokens then -ntg "
                        "generated ones (bench_batched.py); with --llama-cpp, llama.cpp's on the same file")
    p.add_argument("-npp", type=_positive("-npp"), default=128, help="-npl: prompt tokens per sequence (default 128)")
    p.add_argument("-ntg", type=_positive("-ntg"), default=128, help="-npl: generated tokens per sequence (default 128)")
    p.add_argument("--spec-prompts", type=Path, nargs="+", default=[], metavar="FILE",
                   help="text files whose first D tokens (-d D) are the draft-MTP rows' prompts (default: random ids)")
    return p


def _choice_list(what: str, choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = list(dict.fromkeys(s.strip() for s in text.split(",")))
        if not items or any(i not in choices for i in items):
            raise argparse.ArgumentTypeError(f"{what} takes a comma-separated list of {', '.join(choices)}, got {text!r}")
        return items
    return parse


# ---------------------------------------------------------------------------------------------------- model info

def _human_bytes(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def _human_params(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def _traffic(m: Any, tokens: list[int], logits_all: bool, n_runs: int) -> dict[str, Any]:
    """Splits, bytes copied between devices and median copy seconds of evaluating `tokens` after a reset."""
    seconds, t = [], {}
    m.profile_traffic(True)
    try:
        for _ in range(n_runs):
            m.reset()
            m.eval(tokens, logits_all=logits_all)
            t = m.graph_traffic
            seconds.append(t["copy_seconds"])
    finally:
        m.profile_traffic(False)
    return {"rows": len(tokens), "splits": t["splits"], "bytes_copied": t["bytes_copied"],
            "copy_seconds": statistics.median(seconds)}


def model_info(ours: OursRunner, path: Path, threads: int, n_batch: int, n_ctx: int) -> dict[str, Any]:
    m = ours.model
    # What crosses devices per graph (runtime/traffic.h; the rows reset the sequence before they run): a decode
    # token, a verify pass with 3 drafts, a prefill ubatch. Copy time is measured with every node synced.
    traffic = {"decode": _traffic(m, [0], False, 5), "verify4": _traffic(m, [0] * min(4, m.n_ctx), True, 3),
               "prefill": _traffic(m, [0] * min(n_batch, m.n_ctx), False, 1)}
    tensors = m.tensors()
    size = sum(t.nbytes for t in tensors)
    params = sum(math.prod(t.shape) for t in tensors)
    try:
        import gguf
        ftype = gguf.LlamaFileType(m.metadata("general.file_type")).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (KeyError, ValueError):
        by_type: dict[str, int] = {}
        for _, ty, _, nbytes in tensors:
            by_type[ty] = by_type.get(ty, 0) + nbytes
        ftype = max(by_type, key=by_type.get).upper()
    arch = m.metadata("general.architecture")
    return {"model": f"{arch} {_human_params(params).replace(' ', '')} {ftype}", "path": str(path),
            "file_bytes": path.stat().st_size, "size_bytes": size, "params": params,
            "backend": ",".join(sorted(set(m.placement().values()))) + f" ({traffic['decode']['splits']} splits)",
            "traffic": traffic,
            "threads": threads,
            "n_batch": n_batch,
            "n_ctx": n_ctx}


# ---------------------------------------------------------------------------------------------------- output

def _tps_cell(s: dict[str, Any]) -> str:
    return f"{s['tps_median']:.2f} ± {s['tps_stdev']:.2f}"


def _table(header: list[str], align: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in lines)) if lines else len(h) for i, h in enumerate(header)]
    def fmt(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if a == "r" else c.ljust(w)
                                 for c, w, a in zip(cells, widths, align)) + " |"
    rule = "| " + " | ".join("-" * (w - 1) + ":" if a == "r" else "-" * w for w, a in zip(widths, align)) + " |"
    return "\n".join([fmt(header), rule, *(fmt(r) for r in lines)])


def render_md(report: dict[str, Any]) -> str:
    info, engines = report["model"], report["engines"]
    header = ["model", "size", "params", "backend", "threads", "test", "t/s"]
    align = ["l", "r", "r", "l", "r", "r", "r"]
    if UPSTREAM in engines:
        header += ["llama.cpp t/s", "ratio"]
        align += ["r", "r"]
    lines = []
    for row in report["rows"]:
        cells = [info["model"], _human_bytes(info["size_bytes"]), _human_params(info["params"]), info["backend"],
                 str(info["threads"]), row["test"], _tps_cell(row[OURS])]
        if UPSTREAM in engines:
            cells += [_tps_cell(row[UPSTREAM]), f"{row['ratio']:.3f}"]
        lines.append(cells)
    out = [_table(header, align, lines), "",
           f"t/s: median ± stdev of {report['repetitions']} runs; n_batch {info['n_batch']}, n_ctx {info['n_ctx']}"
           + (", ratio = glm5next / llama.cpp (medians)" if UPSTREAM in engines else "")]
    if info["traffic"]["decode"]["splits"] > 1:
        out += ["", "between devices, per graph run (copy time measured with every node synced; share = of the first "
                "pp / tg row's time per ubatch / token):", _traffic_table(report)]
    mem = report.get("memory")
    if mem:
        out += ["", f"resident memory (file {_human_bytes(info['file_bytes'])}, memory-mapped):", _memory_table(mem)]
    return "\n".join(out)


def _traffic_table(report: dict[str, Any]) -> str:
    traffic = report["model"]["traffic"]
    first_tps = {kind: next((r[OURS]["tps_median"] for r in report["rows"] if r["test"].startswith(kind)), None)
                 for kind in ("pp", "tg")}
    lines = []
    for graph, kind in (("decode", "tg"), ("verify4", None), ("prefill", "pp")):
        t = traffic[graph]
        tps = first_tps.get(kind) if kind else None
        share = f"{100 * t['copy_seconds'] * tps / t['rows']:.1f}%" if tps else "-"
        rows = f"{t['rows']} row" + ("s" if t["rows"] > 1 else "")
        lines.append([f"{graph} ({rows})", str(t["splits"]), f"{t['bytes_copied'] / 1024:.1f} KiB",
                      f"{1e3 * t['copy_seconds']:.3f}", share])
    return _table(["graph", "splits", "copied", "copy ms", "share"], ["l", "r", "r", "r", "r"], lines)


def _memory_table(mem: list[dict[str, Any]]) -> str:
    base = mem[0]["RssAnon"]
    lines = [[m["stage"], _human_bytes(m["VmRSS"]), _human_bytes(m["RssAnon"]), _human_bytes(m["RssFile"]),
              _human_bytes(m["RssAnon"] - base)] for m in mem]
    return _table(["stage", "RSS", "RssAnon", "RssFile", "RssAnon - baseline"], ["l", "r", "r", "r", "r"], lines)


STAT_KEYS = ["tps_median", "tps_mean", "tps_stdev", "tps_min", "tps_max"]


def render_csv(report: dict[str, Any]) -> str:
    info, engines = report["model"], report["engines"]
    header = ["model", "size_bytes", "params", "backend", "threads", "n_batch", "test", "n_prompt", "n_gen",
              "n_depth", "repetitions"]
    header += [f"{e}_{k}" for e in engines for k in STAT_KEYS]
    if UPSTREAM in engines:
        header.append("ratio")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in report["rows"]:
        cells = [info["model"], info["size_bytes"], info["params"], info["backend"], info["threads"],
                 info["n_batch"], row["test"], row["n_prompt"], row["n_gen"], row["n_depth"], report["repetitions"]]
        cells += [row[e][k] for e in engines for k in STAT_KEYS]
        if UPSTREAM in engines:
            cells.append(row["ratio"])
        w.writerow(cells)
    return buf.getvalue().rstrip("\n")


# ---------------------------------------------------------------------------------------------------- main

def _inputs(ours: OursRunner, n_depth: int, n_prompt: int, n_gen: int, seed: int, tg_argmax: bool) -> Inputs:
    types = ours.model.tokenizer.token_types
    normal = np.array([i for i, ty in enumerate(types) if ty == NORMAL] or range(ours.model.n_vocab))
    rng = np.random.default_rng(seed)
    def draw(n: int) -> list[int]:
        return normal[rng.integers(0, len(normal), n)].tolist()
    return Inputs(depth=draw(n_depth), prompt=draw(n_prompt), gen=draw(n_gen + 1), tg_argmax=tg_argmax)


def _load(cls: type, what: str, path: Path, n_ctx: int, threads: int, n_batch: int, **placement):
    try:
        return cls(path, n_ctx, threads, n_batch, **placement)
    except BenchError:
        raise
    except (ValueError, RuntimeError, OSError) as e:
        raise BenchError(f"{what} cannot load {path}: {e}") from None


def _first_eval(runner: Runner, inputs: Inputs, n: int) -> None:
    """Allocate what the largest ubatch needs (caches, compute buffers) before memory is measured."""
    runner.reset()
    runner.eval((inputs.depth + inputs.prompt + inputs.gen)[:n])
    runner.reset()


def run(args: argparse.Namespace) -> dict[str, Any]:
    path: Path = args.model
    if not path.is_file():
        raise BenchError(f"model file not found: {path}")
    if args.spec_accept is not None and args.spec_accept < 1:
        raise BenchError(f"--spec-accept {args.spec_accept}: a mean accepted length per round is >= 1")
    if args.spec_prompts and not args.spec_n_max:
        raise BenchError("--spec-prompts needs --spec-n-max (they are the draft-MTP rows' prompts)")
    if args.spec_prompts and 0 in args.n_depth:
        raise BenchError("--spec-prompts takes the prompt length from -d: give depths >= 1")
    texts = [_read_text(f) for f in args.spec_prompts]
    if args.llama_cpp and (args.rpc or args.n_gpu_layers):
        raise BenchError("--llama-cpp runs llama-cpp-python on the CPU (its Python API has no RPC client): "
                         "compare a placement (--rpc, -ngl) with glm5next-bench's own CPU-only rows instead")
    if args.llama_cpp:
        try:
            import llama_cpp  # noqa: F401  (imported before the memory baseline)
        except ImportError as e:
            raise BenchError(f"--llama-cpp needs llama-cpp-python: {e}") from None
    from . import model as _model  # noqa: F401  (the native module, before the memory baseline)

    prompts = [p for p in args.n_prompt if p > 0]
    gens = [n for n in args.n_gen if n > 0]
    if not prompts and not gens:
        raise BenchError("nothing to run: -p and -n are both 0")
    max_depth, max_prompt, max_gen = max(args.n_depth), max(prompts, default=0), max(gens, default=0)
    n_ctx = max_depth + max(max_prompt, max_gen + 1 + max((s.n_max for s in args.spec_n_max), default=0), 1)
    warm_n = min(args.batch_size, n_ctx)  # one full ubatch

    memory: list[dict[str, Any]] = []
    def snap(stage: str) -> None:
        s = memory_snapshot()
        if s is not None:
            memory.append({"stage": stage, **s})

    snap("baseline (imports)")
    placement = dict(rpc=args.rpc.split(",") if args.rpc else [], n_gpu_layers=args.n_gpu_layers,
                     cpu_moe=args.cpu_moe)
    ours = _load(OursRunner, PROG, path, n_ctx, args.threads, args.batch_size, **placement)
    snap("glm5next loaded")
    inputs = _inputs(ours, max(max_depth, warm_n), max_prompt, max_gen, args.seed, args.tg_tokens == "argmax")
    _first_eval(ours, inputs, warm_n)
    snap(f"glm5next after a {warm_n}-token eval")
    runners: list[Runner] = [ours]
    if args.llama_cpp:
        upstream = _load(LlamaCppRunner, "llama-cpp-python", path, n_ctx, args.threads, args.batch_size)
        snap("+ llama.cpp loaded")
        _first_eval(upstream, inputs, warm_n)
        snap(f"+ llama.cpp after a {warm_n}-token eval")
        runners.append(upstream)

    rows = build_rows(prompts, gens, args.n_depth, inputs)
    info = model_info(ours, path, args.threads, args.batch_size, n_ctx)
    results = []
    from tqdm import tqdm
    with tqdm(total=len(rows), desc=PROG, unit="row", file=sys.stderr, dynamic_ncols=True) as bar:
        for row in rows:
            bar.set_postfix_str(row.name)
            if not args.no_warmup:
                for r in runners:
                    row.run(r)
            stats = {r.key: Stats() for r in runners}
            for _ in range(args.repetitions):
                for r in runners:  # interleaved: ours, then upstream, repetition by repetition
                    n, s = row.run(r)
                    stats[r.key].tokens.append(n)
                    stats[r.key].seconds.append(s)
            out = {"test": row.name, **row.params, **{k: v.summary() for k, v in stats.items()}}
            if UPSTREAM in stats:
                out["ratio"] = out[OURS]["tps_median"] / out[UPSTREAM]["tps_median"]
            results.append(out)
            bar.update()
    spec_rows = run_spec_rows(ours, args, spec_prompts(ours, args, texts, inputs), n_ctx) if args.spec_n_max else []
    return {"model": info, "engines": [r.key for r in runners], "repetitions": args.repetitions,
            "tg_tokens": args.tg_tokens, "rows": results, "spec_rows": spec_rows, "spec_accept": args.spec_accept,
            "memory": memory}


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchError(f"--spec-prompts: cannot read {path}: {e}") from None


def spec_prompts(ours: OursRunner, args: argparse.Namespace, texts: list[str],
                 inputs: Inputs) -> dict[int, list[list[int]]]:
    """Depth -> the draft-MTP rows' prompts: each text's first `depth` token ids, or (no texts) the random ids of
    the depth prefill followed by the first tg input. Raises BenchError for a text shorter than a depth."""
    if not texts:
        return {d: [inputs.depth[:d] + inputs.gen[:1]] for d in args.n_depth}
    ids = [ours.model.tokenize(t, parse_special=False) for t in texts]
    for path, i in zip(args.spec_prompts, ids):
        if len(i) < max(args.n_depth):
            raise BenchError(f"--spec-prompts: {path} has {len(i)} tokens, fewer than -d {max(args.n_depth)}")
    return {d: [i[:d] for i in ids] for d in args.n_depth}


def _summed_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The generator counters of several generations added up; acceptance per position and mean accepted length
    recomputed from the sums (runtime.md: accepted drafts + 1 per round that carried drafts)."""
    width = max(len(s["drafted_at"]) for s in stats)
    def column(key: str) -> list[int]:
        return [sum(s[key][i] for s in stats if i < len(s[key])) for i in range(width)]
    drafted, accepted = column("drafted_at"), column("accepted_at")
    rounds = sum(s["n_drafts"] for s in stats)
    n_accepted = sum(s["n_accepted"] for s in stats)
    return {"n_drafts": rounds, "n_drafted": sum(s["n_drafted"] for s in stats), "n_accepted": n_accepted,
            "drafted_at": drafted, "accepted_at": accepted,
            "acceptance_per_position": [a / d if d else 0.0 for a, d in zip(accepted, drafted)],
            "mean_accepted_length": (n_accepted + rounds) / rounds if rounds else 0.0,
            "rounds_at_length": [sum(s["rounds_at_length"][k] for s in stats if k < len(s["rounds_at_length"]))
                                 for k in range(max(len(s["rounds_at_length"]) for s in stats))],
            "draft_ms": sum(s["draft_ms"] for s in stats), "verify_ms": sum(s["verify_ms"] for s in stats)}


def _spec_pair(ours: OursRunner, prompt: list[int], n_gen: int, length: SpecLength, accept: float | None, share: str,
               draft_type: str, drafted_first: bool) -> tuple[int, float, float, dict]:
    """One back-to-back pair on `prompt`: the rounds without drafts and with `length`'s. Returns (tokens, seconds
    without, seconds with, the drafting generator's counters). Which runs first alternates from pair to pair (the
    caller's drafted_first): plain decoding timed against itself came out ~3% faster or slower in second place,
    depending on the machine."""
    def plain() -> tuple[int, float, dict]:
        return ours.spec_decode(prompt, n_gen, 0, None, share, draft_type)

    def drafted() -> tuple[int, float, dict]:
        return ours.spec_decode(prompt, n_gen, length.n_max, accept, share, draft_type, length.adaptive)

    if drafted_first:
        (_, s_on, stats), (n, s_off, _) = drafted(), plain()
    else:
        (n, s_off, _), (_, s_on, stats) = plain(), drafted()
    return n, s_off, s_on, stats


def run_spec_rows(ours: OursRunner, args: argparse.Namespace, prompts: dict[int, list[list[int]]],
                  n_ctx: int) -> list[dict[str, Any]]:
    """For each tg N @ depth and each (n_max, index share, draft type): the median t/s of draft-MTP rounds and of
    the same rounds without drafts, prompt by prompt, repetition by repetition, and the acceptance the rounds saw
    (summed over the prompts)."""
    rows = []
    gens = [n for n in args.n_gen if n > 0]
    combos = [(n_max, share, dt) for n_max in args.spec_n_max for share in args.spec_index_share
              for dt in args.spec_draft_type]
    for depth in args.n_depth:
        for n_gen in gens:
            if depth + 1 + n_gen + max(s.n_max for s in args.spec_n_max) > n_ctx:
                continue
            for length, share, dt in combos:
                on, off = Stats(), Stats()
                log_ratios = []  # per (repetition, prompt): log(seconds without drafts / seconds with)
                for rep in range(args.repetitions + (0 if args.no_warmup else 1)):
                    n, s_off, s_on = 0, 0.0, 0.0
                    stats = []
                    for i, prompt in enumerate(prompts[depth]):
                        n_p, plain, drafted, st = _spec_pair(ours, prompt, n_gen, length, args.spec_accept, share, dt,
                                                             drafted_first=(rep + i) % 2 == 1)
                        n, s_off, s_on = n + n_p, s_off + plain, s_on + drafted
                        stats.append(st)
                        if rep or args.no_warmup:
                            log_ratios.append(math.log(plain / drafted))
                    if rep or args.no_warmup:
                        off.tokens.append(n), off.seconds.append(s_off)
                        on.tokens.append(n), on.seconds.append(s_on)
                total = _summed_stats(stats)
                name = _test_name("tg", n_gen, depth) + f" {length}" + (f" share {share}" if share != "auto" else "") \
                    + (f" draft {dt}" if dt != "auto" else "") \
                    + (f" x {len(prompts[depth])} prompts" if args.spec_prompts else "")
                rows.append({"test": name, "n_gen": n_gen, "n_depth": depth, "n_max": length.n_max,
                             "adaptive": length.adaptive, "index_share": share,
                             "draft_type": dt, "n_prompts": len(prompts[depth]), "spec": on.summary(),
                             "no_spec": off.summary(),
                             **paired_speedup(log_ratios),
                             **{k: total[k] for k in ("mean_accepted_length", "acceptance_per_position",
                                                      "rounds_at_length", "draft_ms", "verify_ms")}})
    return rows


def paired_speedup(log_ratios: list[float]) -> dict[str, float]:
    """speedup: the geometric mean of the paired time ratios (a prompt's rounds without drafts, then the same rounds
    with, back to back), and speedup_se its standard error (delta method; 0 for a single pair). Pairs, not ratios
    of medians: on a shared machine the speed of the same 128-token generation varies by ~15-20% from one run to the
    next (measured: plain decoding against itself, 200 pairs, 2 cores), which back-to-back pairs largely cancel."""
    mean = statistics.fmean(log_ratios)
    se = statistics.stdev(log_ratios) / math.sqrt(len(log_ratios)) if len(log_ratios) > 1 else 0.0
    return {"speedup": math.exp(mean), "speedup_se": math.exp(mean) * se}


def render_spec_md(rows: list[dict[str, Any]], accept: float | None) -> str:
    lines = [[r["test"], _tps_cell(r["spec"]), _tps_cell(r["no_spec"]), f"{r['speedup']:.3f} ± {r['speedup_se']:.3f}",
              f"{r['mean_accepted_length']:.2f}", " ".join(f"{a:.2f}" for a in r["acceptance_per_position"]),
              " ".join(str(n) for n in r["rounds_at_length"]), f"{r['draft_ms']:.1f} / {r['verify_ms']:.1f}"]
             for r in rows]
    table = _table(["test", "t/s", "t/s no drafts", "speedup", "accepted len", "accept per pos", "rounds by length",
                    "draft / verify ms"], ["l", "r", "r", "r", "r", "l", "l", "r"], lines)
    how = "synthetic acceptance" if accept is not None else "real acceptance (greedy)"
    return (f"draft-MTP ({how}; speedup = the geometric mean of t/s / t/s of the same rounds without drafts, each "
            f"prompt and repetition a back-to-back pair, ± its standard error; rounds by length: "
            f"rounds that drafted 0, 1, ... tokens; draft / verify ms: the last repetition, all prompts):\n{table}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)  # bad flags: argparse prints usage and the error
    except SystemExit as e:  # returned, not raised, so that main() is callable (exit 2 on bad flags, 0 on -h)
        return e.code if isinstance(e.code, int) else 2
    try:
        if args.npl:
            return _main_batched(args)
        report = run(args)
    except BenchError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(report, indent=2))
    elif args.output == "csv":
        print(render_csv(report))
        if report["memory"]:
            print(_memory_table(report["memory"]), file=sys.stderr)
    else:
        print(render_md(report))
        if report["spec_rows"]:
            print("\n" + render_spec_md(report["spec_rows"], report["spec_accept"]))
    return 0


def _main_batched(args: argparse.Namespace) -> int:
    """-npl: the batched table (bench_batched.py) in the chosen output format."""
    from .bench_batched import render_batched_md, run_batched
    if not args.model.is_file():
        raise BenchError(f"model file not found: {args.model}")
    try:
        rows = run_batched(args.model, args.npl, args.npp, args.ntg, args.threads, args.batch_size, args.repetitions,
                           args.spec_n_max, args.llama_cpp, args.seed, [_read_text(f) for f in args.spec_prompts])
    except (ValueError, RuntimeError, OSError) as e:
        raise BenchError(str(e)) from None
    print(json.dumps(rows, indent=2) if args.output == "json" else render_batched_md(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
