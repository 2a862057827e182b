"""glm5next-bench's command line: parser() builds the argparse parser of every flag, with the value parsers that
turn a flag's text into its checked values (comma-separated integers, --spec-n-max's SpecLength entries, choice
lists) or an argparse error."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..cache_sizes import CACHE_TYPES
from .errors import PROG
from .speculative import SpecLength


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


def _spec_n_max_list(text: str) -> list[SpecLength]:
    """--spec-n-max "1,2,3,auto" -> SpecLength entries (repeats dropped). ArgumentTypeError for anything else."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        auto = item.startswith("auto")
        digits = item[4:] if auto else item
        if auto and not digits:
            from ..model import DRAFT_N_MAX  # `auto`: the default upper bound, as --spec-draft-n-max
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


def _choice_list(what: str, choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = list(dict.fromkeys(s.strip() for s in text.split(",")))
        if not items or any(i not in choices for i in items):
            raise argparse.ArgumentTypeError(f"{what} takes a comma-separated list of {', '.join(choices)}, got {text!r}")
        return items
    return parse


def parser() -> argparse.ArgumentParser:
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
    p.add_argument("-ctk", "--cache-type-k", choices=list(CACHE_TYPES), default="f16",
                   help="attention caches' row type, for both engines (llama.cpp's type_k and type_v; default f16)")
    p.add_argument("-r", "--repetitions", type=_positive("-r"), default=3, help="runs per test (default 3)")
    p.add_argument("--rpc", metavar="HOST:PORT[,...]", help="ggml RPC servers whose devices join (as glm5next-server)")
    p.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, metavar="N",
                   help="offload the last N layers (trunk + output layer) to the first offload device (0)")
    p.add_argument("--cpu-moe", action="store_true", help="keep the routed experts on the CPU")
    p.add_argument("-ot", "--override-tensor", action="append", default=[], metavar="REGEX=DEVICE",
                   help="put glm5next's tensors matching REGEX on DEVICE (as glm5next-server; repeatable)")
    p.add_argument("--override-kv", action="append", default=[], metavar="KEY=TYPE:VALUE[,...]",
                   help="override a GGUF metadata key for both engines, e.g. glm5next.attention.indexer.top_k=int:1024 "
                        "(as glm5next-server; checked by glm5next's loader, then given to llama-cpp-python as its "
                        "kv_overrides with the key spelled as the file's architecture; repeatable)")
    p.add_argument("--llama-cpp", action="store_true",
                   help="also run every row on llama-cpp-python (same file, threads, batch), interleaved")
    p.add_argument("--tg-tokens", choices=["random", "argmax"], default="random",
                   help="tg input: a fixed pseudo-random sequence (llama-bench) or each step's argmax")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip the untimed run of each row before its repetitions, and glm5next's warmup at load "
                        "(Model(warmup=False): no draft-MTP round costs timed)")
    p.add_argument("--seed", type=int, default=0, help="seed of the token ids fed (default 0)")
    p.add_argument("-o", "--output", choices=["md", "csv", "json"], default="md", help="output format (default md)")
    p.add_argument("--spec-n-max", type=_spec_n_max_list, default=[],
                   help="draft-MTP rows: drafts per round, comma-separated; auto or autoN: adaptive draft lengths, "
                        "at most 3 or N (default: no speculative rows)")
    p.add_argument("--spec-accept", type=float, default=None, metavar="L",
                   help="synthetic acceptance: mean accepted length per round (accepted drafts + 1), e.g. 3.61; for "
                        "the draft-MTP rows and -npl's")
    p.add_argument("--spec-index-share", type=_choice_list("--spec-index-share", ("auto", "on", "off")),
                   default=["auto"], help="index sharing of the draft steps, comma-separated (auto, on, off)")
    p.add_argument("--op-profile", action="store_true",
                   help="with --spec-n-max: after each draft-MTP row, one more generation with drafts and one without, "
                        "every graph node timed alone: where a round's time goes, by graph and op")
    p.add_argument("--spec-draft-type", type=_choice_list("--spec-draft-type", ("auto", "q8_0", "q4_0")),
                   default=["auto"], help="draft layer types, comma-separated (auto = as stored, q8_0, q4_0)")
    p.add_argument("-npl", type=_int_list("-npl", 1), default=[], metavar="B,...",
                   help="llama-batched-bench's table instead: B sequences at once, each -npp prompt tokens then -ntg "
                        "generated ones (bench/batched.py); with --llama-cpp, llama.cpp's on the same file")
    p.add_argument("--census", action="store_true",
                   help="-npl: after the table, glm5next's graph census per graph kind: compute nodes by device, "
                        "splits, row groups, products, one-matrix MUL_MAT_IDs, CUDA-graph blockers (Hopper's rule; an "
                        "RPC device counts as CUDA with GLM5NEXT_RPC_BACKEND=CUDA) and device reads per run")
    p.add_argument("-npp", type=_positive("-npp"), default=128, help="-npl: prompt tokens per sequence (default 128)")
    p.add_argument("-ntg", type=_positive("-ntg"), default=128, help="-npl: generated tokens per sequence (default 128)")
    p.add_argument("--spec-prompts", type=Path, nargs="+", default=[], metavar="FILE",
                   help="text files whose first D tokens (-d D) are the draft-MTP rows' prompts (default: random ids)")
    return p
