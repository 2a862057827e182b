"""The glm5next-bench command: main parses the flags, runs the llama-bench rows (run: load the engines, measure
their memory, time every row repetition by repetition, then the draft-MTP rows) or, with -npl, the batched table,
prints the report in the chosen format and returns the exit status (2 on a BenchError or a bad flag)."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .arguments import parser
from .errors import PROG, BenchError
from .model_info import model_info
from .report import memory_table, render_csv, render_md, render_op_profile_md, render_spec_md
from .rows import Inputs, build_rows, draw_inputs
from .runners import OURS, UPSTREAM, LlamaCppRunner, OursRunner, Runner, llama_kv_overrides, load_runner
from .speculative import run_spec_rows, spec_prompts
from .stats import Stats, memory_snapshot


def _first_eval(runner: Runner, inputs: Inputs, n: int) -> None:
    """Allocate what the largest ubatch needs (caches, compute buffers) before memory is measured."""
    runner.reset()
    runner.eval((inputs.depth + inputs.prompt + inputs.gen)[:n])
    runner.reset()


def _placement(args: argparse.Namespace) -> dict[str, Any]:
    """glm5next's Model keywords from the placement and metadata flags (--rpc, -ngl, --cpu-moe, -ctk, --no-warmup,
    --override-kv, -ot)."""
    return dict(rpc=args.rpc.split(",") if args.rpc else [], n_gpu_layers=args.n_gpu_layers, cpu_moe=args.cpu_moe,
                cache_type_k=args.cache_type_k, warmup=not args.no_warmup, override_kv=args.override_kv,
                override_tensor=args.override_tensor)


def run(args: argparse.Namespace) -> dict[str, Any]:
    path: Path = args.model
    if not path.is_file():
        raise BenchError(f"model file not found: {path}")
    if args.spec_prompts and not args.spec_n_max:
        raise BenchError("--spec-prompts needs --spec-n-max (they are the draft-MTP rows' prompts)")
    if args.op_profile and not args.spec_n_max:
        raise BenchError("--op-profile needs --spec-n-max (it profiles the draft-MTP rows' generations)")
    if args.spec_prompts and 0 in args.n_depth:
        raise BenchError("--spec-prompts takes the prompt length from -d: give depths >= 1")
    texts = [_read_text(f) for f in args.spec_prompts]
    if args.llama_cpp and (args.rpc or args.n_gpu_layers or args.override_tensor):
        raise BenchError("--llama-cpp runs llama-cpp-python on the CPU (its Python API has no RPC client): "
                         "compare a placement (--rpc, -ngl, -ot) with glm5next-bench's own CPU-only rows instead")
    if args.llama_cpp:
        try:
            import llama_cpp  # noqa: F401  (imported before the memory baseline)
        except ImportError as e:
            raise BenchError(f"--llama-cpp needs llama-cpp-python: {e}") from None
    from .. import model as _model  # noqa: F401  (the native module, before the memory baseline)

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
    ours = load_runner(OursRunner, PROG, path, n_ctx, args.threads, args.batch_size, **_placement(args))
    snap("glm5next loaded")
    inputs = draw_inputs(ours, max(max_depth, warm_n), max_prompt, max_gen, args.seed, args.tg_tokens == "argmax")
    _first_eval(ours, inputs, warm_n)
    snap(f"glm5next after a {warm_n}-token eval")
    runners: list[Runner] = [ours]
    if args.llama_cpp:
        upstream = load_runner(LlamaCppRunner, "llama-cpp-python", path, n_ctx, args.threads, args.batch_size,
                               cache_type_k=args.cache_type_k, kv_overrides=llama_kv_overrides(ours.model.kv_overrides))
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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)  # bad flags: argparse prints usage and the error
    except SystemExit as e:  # returned, not raised, so that main() is callable (exit 2 on bad flags, 0 on -h)
        return e.code if isinstance(e.code, int) else 2
    try:
        if args.spec_accept is not None and args.spec_accept < 1:
            raise BenchError(f"--spec-accept {args.spec_accept}: a mean accepted length per round is >= 1")
        if args.census and not args.npl:
            raise BenchError("--census takes the census of -npl's graphs: give -npl")
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
            print(memory_table(report["memory"]), file=sys.stderr)
    else:
        print(render_md(report))
        if report["spec_rows"]:
            print("\n" + render_spec_md(report["spec_rows"], report["spec_accept"]))
        for row in report["spec_rows"]:
            if "op_profile" in row:
                print("\n" + render_op_profile_md(row))
    return 0


def _main_batched(args: argparse.Namespace) -> int:
    """-npl: the batched table (batched.py) in the chosen output format."""
    from .batched import render_batched_md, render_census_md, run_batched
    if not args.model.is_file():
        raise BenchError(f"model file not found: {args.model}")
    if args.llama_cpp and (args.rpc or args.cpu_moe or args.override_tensor):
        raise BenchError("-npl --llama-cpp places llama.cpp's layers with -ngl alone (llama-cpp-python's "
                         "n_gpu_layers, on the GPU it was built for): --rpc, --cpu-moe and -ot have no counterpart "
                         "there")
    census: dict[str, Any] | None = {} if args.census else None
    try:
        rows = run_batched(args.model, args.npl, args.npp, args.ntg, args.threads, args.batch_size, args.repetitions,
                           args.spec_n_max, args.llama_cpp, args.seed, [_read_text(f) for f in args.spec_prompts],
                           _placement(args), census, args.spec_accept)
    except (ValueError, RuntimeError, OSError) as e:
        raise BenchError(str(e)) from None
    if args.output == "json":
        print(json.dumps(rows if census is None else {"rows": rows, "census": census}, indent=2))
    else:
        print(render_batched_md(rows))
        if census is not None:
            print("\n" + render_census_md(census))
    return 0
