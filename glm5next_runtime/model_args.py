"""The model flags that glm5next-server and glm5next-cli share (llama.cpp names and meanings), and loading a Model
from them."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from . import _core
from .cache_sizes import CACHE_TYPES
from .model import DRAFT_N_MAX, INDEX_SHARE, SPEC_SAMPLING, SPEC_TYPES, Model
from .placement import SPLIT_MODES, describe_placement

DRAFT_TYPES = ("auto", "q8_0", "q4_0")
# llama-server's -ctk / -ctv values (common/arg.cpp kv_cache_types); -ctv takes them all and changes nothing here
LLAMA_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def split_list(value: str) -> list[str]:
    """A comma-separated flag value (--rpc "HOST:PORT,HOST:PORT", -dev "CUDA0,RPC0") -> its items (empty ones
    dropped)."""
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_tensor_split(value: str | None) -> list[float] | None:
    """-ts "3,1" or "3/1" (llama.cpp accepts both separators) -> [3.0, 1.0]. Raises ValueError naming it."""
    if not value:
        return None
    try:
        return [float(x) for x in value.replace("/", ",").split(",")]
    except ValueError:
        raise ValueError(f"--tensor-split {value!r}: expected numbers separated by ',' or '/'") from None


def list_devices_if_asked(prog: str, argv: Sequence[str] | None) -> None:
    """--list-devices, as llama.cpp has it: print ggml's devices (with those of any --rpc servers, wherever the
    flags stand on the command line) and exit 0, before the other flags are required or checked. Exits 1 naming
    an --rpc endpoint that does not answer."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list-devices" not in argv:
        return
    pre = argparse.ArgumentParser(prog=prog, add_help=False)
    pre.add_argument("--rpc", default="")
    known, _ = pre.parse_known_args(argv)
    try:
        _core.add_rpc_servers(split_list(known.rpc))
    except (ValueError, RuntimeError) as e:
        pre.exit(1, f"{prog}: error: {e}\n")
    print("Available devices:")
    for d in _core.list_devices(memory=True):
        print(f"  {d['name']}: {d['description']} ({d['memory_total'] // 2**20} MiB, "
              f"{d['memory_free'] // 2**20} MiB free)")
    sys.stdout.flush()
    pre.exit(0)


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Add -m, -md, -c, -t, -b, --rpc, --list-devices, the placement flags, the speculation flags, --override-kv,
    --seed, --ctx-checkpoints, --mmap / --no-mmap, --mlock, --warmup and --checkpoint-every-n-tokens to `p`."""
    p.add_argument("-m", "--model", required=True, metavar="FILE", help="the glm5next .gguf file")
    p.add_argument("-md", "--model-draft", metavar="FILE",
                   help="separate draft file (converted with --mtp-only) whose NextN layer drafts for -m")
    p.add_argument("-c", "--ctx-size", type=int, default=4096, metavar="N", help="context size in tokens (4096)")
    p.add_argument("-t", "--threads", type=int, metavar="N", help="CPU threads (default: all cores)")
    p.add_argument("-b", "--batch-size", type=int, default=512, metavar="N",
                   help="prompt tokens per forward pass (512)")
    p.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", type=int, default=0, metavar="N",
                   help="offload the last N layers (trunk layers + output layer) to the offload devices (GPUs, --rpc), "
                        "split as -sm/-ts say (0)")
    p.add_argument("--cpu-moe", action="store_true", help="keep every routed-expert weight on the CPU")
    p.add_argument("--n-cpu-moe", type=int, default=0, metavar="N",
                   help="keep the routed experts of the first N layers on the CPU")
    p.add_argument("--rpc", metavar="HOST:PORT[,...]",
                   help="ggml RPC servers (glm5next-rpc-server) whose devices join this process's (comma-separated)")
    p.add_argument("--list-devices", action="store_true",
                   help="print the available devices (with the --rpc servers') and exit (see list_devices_if_asked)")
    p.add_argument("-dev", "--device", metavar="DEV[,DEV...]",
                   help="offload devices to use, in order (none: no offload; default: every GPU and RPC device)")
    p.add_argument("-sm", "--split-mode", choices=SPLIT_MODES, default="layer",
                   help="how offloaded layers use several devices: layer (split by -ts) or none (-mg only)")
    p.add_argument("-ts", "--tensor-split", metavar="N0,N1,...",
                   help="proportions of the offloaded layers per device (default: equal)")
    p.add_argument("-mg", "--main-gpu", type=int, default=0, metavar="I",
                   help="the device (index among the offload devices) that -sm none uses (0)")
    p.add_argument("-devd", "--device-draft", metavar="DEV",
                   help="device of the draft (NextN) layer (default: the device of the last trunk layer)")
    p.add_argument("-ot", "--override-tensor", action="append", default=[], metavar="REGEX=DEVICE",
                   help="put tensors matching REGEX on DEVICE (repeatable; comma-separated lists too)")
    p.add_argument("--spec-type", choices=SPEC_TYPES,
                   help="speculative decoding (default: draft-mtp when the file has a NextN layer, else none)")
    p.add_argument("--spec-draft-n-max", type=int, default=DRAFT_N_MAX, metavar="N",
                   help=f"draft tokens per round (with --spec-draft-adaptive on, the most) ({DRAFT_N_MAX})")
    p.add_argument("--spec-draft-n-min", type=int, default=0, metavar="N",
                   help="shortest draft worth verifying (0)")
    p.add_argument("--spec-draft-p-min", type=float, default=0.0, metavar="P",
                   help="stop drafting below this draft probability (0.0)")
    p.add_argument("--spec-draft-adaptive", choices=("on", "off"), default="on",
                   help="on: each round drafts as many tokens as pay on this machine and file (at most "
                        "--spec-draft-n-max; none when drafting does not), from measured acceptance and timings; "
                        "greedy output is unchanged, and so is sampled output with --spec-sampling match; under "
                        "rejection a request that samples with a fixed seed drafts --spec-draft-n-max every round "
                        "(reproducible output). off: --spec-draft-n-max every round always (on)")
    p.add_argument("--spec-sampling", choices=SPEC_SAMPLING, default="rejection",
                   help="how drafts are kept when sampling (temperature > 0): rejection, speculative sampling "
                        "(kept with probability min(1, p/q): the same distribution, far more drafts kept than match, "
                        "other tokens than decoding without drafts), or match, llama.cpp's rule (the draft head's "
                        "argmax, kept while it equals the token the target draws: a seed gives the tokens of decoding "
                        "without drafts, as llama-server) (rejection)")
    p.add_argument("--spec-draft-type", choices=DRAFT_TYPES, default="auto",
                   help="weight type of the draft layer: auto (as stored) or requantized at load (q8_0, q4_0)")
    p.add_argument("--spec-index-share", choices=list(INDEX_SHARE), default="auto",
                   help="draft steps >= 1 reuse step 0's indexer selection (auto: the file's metadata)")
    p.add_argument("--override-kv", action="append", default=[], metavar="KEY=TYPE:VALUE[,...]",
                   help="override a GGUF metadata key; TYPE is int, float, bool or str (repeatable, or several "
                        "comma-separated as llama.cpp takes them; a comma inside a str value stays in it)")
    p.add_argument("--seed", type=int, default=-1, help="sampling seed (-1: a random one per request)")
    p.add_argument("--ctx-checkpoints", "--swa-checkpoints", type=int, default=32, metavar="N",
                   help="context checkpoints kept per sequence (KDA states a later prompt sharing a prefix resumes "
                        "from; host memory, see the load report) (32)")
    p.add_argument("-ctk", "--cache-type-k", choices=list(CACHE_TYPES), default="f16",
                   help="type of the attention caches' rows: the MLA latent (keys and values) and the indexer's keys "
                        "and gates (f16; q8_0 / q4_0 for widths of whole blocks of 32; pooled keys and KDA states "
                        "stay f32)")
    p.add_argument("-ctv", "--cache-type-v", choices=LLAMA_CACHE_TYPES, default=None,
                   help="accepted for llama-server's command lines, and changes nothing: MLA keeps one latent for "
                        "keys and values, of -ctk's type")
    p.add_argument("--mmap", action=argparse.BooleanOptionalAction, default=True,
                   help="map the model file, every page read in at load (llama-server's default); --no-mmap: read it "
                        "into memory instead (a copy: for a file on a slow or network filesystem)")
    p.add_argument("--mlock", action="store_true",
                   help="lock the weights in RAM: the system never swaps them out or drops their pages (where the "
                        "memory-lock limit refuses, a warning says so and they load unlocked, as llama-server)")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="at load, run each kind of draft-MTP round on a scratch sequence: the weights first touched "
                        "(llama-server's warmup run) and the rounds' costs timed for the adaptive draft lengths "
                        "(with --spec-draft-adaptive on; default on)")
    p.add_argument("-cpent", "--checkpoint-every-n-tokens", type=int, default=8192, metavar="N",
                   help="while prefilling, a context checkpoint every N tokens besides the one at the end of every "
                        "prompt (8192)")


def model_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Model(**kwargs) from parsed add_model_args flags."""
    return dict(path=args.model, n_ctx=args.ctx_size, n_threads=args.threads, n_batch=args.batch_size,
                override_kv=args.override_kv, n_gpu_layers=args.n_gpu_layers, cpu_moe=args.cpu_moe,
                n_cpu_moe=args.n_cpu_moe, override_tensor=args.override_tensor, spec_type=args.spec_type,
                draft_n_max=args.spec_draft_n_max, draft_n_min=args.spec_draft_n_min,
                draft_p_min=args.spec_draft_p_min, draft_adaptive=args.spec_draft_adaptive == "on",
                spec_sampling=args.spec_sampling, spec_index_share=args.spec_index_share,
                spec_draft_type=args.spec_draft_type, draft_model=args.model_draft, rpc=split_list(args.rpc or ""),
                devices=split_list(args.device) if args.device else None, split_mode=args.split_mode,
                tensor_split=parse_tensor_split(args.tensor_split), main_gpu=args.main_gpu,
                draft_device=args.device_draft, ctx_checkpoints=args.ctx_checkpoints,
                checkpoint_every=args.checkpoint_every_n_tokens, cache_type_k=args.cache_type_k, warmup=args.warmup,
                use_mmap=args.mmap, use_mlock=args.mlock)


def request_seed(args: argparse.Namespace) -> int | None:
    """The seed for requests that bring none: --seed, or None (a random one each time) for a negative --seed."""
    return args.seed if args.seed >= 0 else None


def describe_model(model: Model, args: argparse.Namespace) -> list[str]:
    """Load-log lines: the placement plan summary, the ops pinned to the CPU by a device's kernel limits, the memory
    per device (weights, caches, compute buffers; as llama.cpp's load report), what the prompt cache's checkpoints
    may take, which speculation runs (and why) and the draft-MTP round costs measured at load; the sparse indexer's
    top-k and the --override-kv entries applied; how the weights were loaded (--mmap / --no-mmap, --mlock) and how
    long the load and the calibration took."""
    if model.spec_type == "draft-mtp":
        source = f"the NextN layer of {args.model_draft}" if args.model_draft else "the file's NextN layer"
        spec = (f"draft-mtp with {source} (n_max {args.spec_draft_n_max}"
                f"{', adaptive' if args.spec_draft_adaptive == 'on' else ''}, n_min {args.spec_draft_n_min}, "
                f"p_min {args.spec_draft_p_min}, index sharing {args.spec_index_share}, "
                f"sampled drafts kept by {args.spec_sampling}, draft type {args.spec_draft_type})")
    else:
        spec = "none (--spec-type none)" if args.spec_type == "none" else "none (the file has no NextN layer)"
    memory = [f"{m['device']}: weights {m['weights'] / 2**20:.1f} MiB, caches {m['caches'] / 2**20:.1f} MiB, "
              f"compute {m['compute'] / 2**20:.1f} MiB" for m in model.memory()]
    ck = model.checkpoints()
    states = ck["bytes_each"] - 4 * model.hparams["n_embd"]  # what n_ctx does not change (a checkpoint's, less a row)
    per_token = (model.sequence.cache_bytes - states) / model.n_ctx
    hp = model.hparams
    overrides = ", ".join(f"{key}={kind}:{value}" for key, kind, value in model.kv_overrides)
    took = model.load_seconds
    load = (f"load: weights {'mapped (every page read in)' if model.mapped else 'read into memory (--no-mmap)'}"
            f"{', locked in RAM' if model.locked else ''} in {took['weights']:.2f} s"
            + (f", draft-MTP round costs measured in {took['calibration']:.2f} s" if "calibration" in took else ""))
    lines = [load, f"placement: {describe_placement(model.placement())}",
             f"indexer: top-k {model.indexer_top_k} keys per query ({model.indexer_top_k // hp['idx_kpool']} pools of "
             f"{hp['idx_kpool']}; the file's unless overridden); --override-kv applied: {overrides or 'none'}",
             f"memory (one engine: weights and compute buffers once, caches of every slot): {'; '.join(memory)}",
             f"caches per slot: {model.sequence.cache_bytes / 2**20:.1f} MiB ({model.sequence.cache_type} rows, "
             f"n_ctx {model.n_ctx}: "
             f"{'trunk and NextN layer' if model.sequence.has_draft_head else 'trunk; no NextN caches without drafting'}"
             f"; {per_token / 1024:.2f} KiB per token, {states / 2**20:.1f} MiB of KDA states)",
             f"prompt cache: up to {ck['max_count']} context checkpoints per slot, {ck['bytes_each'] / 2**20:.2f} MiB "
             f"each (host memory): a chat turn adds up to 3 (its last user message, its generation prompt, its "
             f"end) and one per {args.checkpoint_every_n_tokens} prompt tokens; at most "
             f"{ck['max_count'] * ck['bytes_each'] / 2**20:.1f} MiB per slot", f"speculation: {spec}"]
    if model.draft_calibration is not None:
        lines.append(f"speculation: {model.draft_calibration.summary()}")
    lines[1:1] = [f"kernel limit: {line}" for line in model.engine.cpu_pinned_ops]
    if args.n_gpu_layers > 0 and not model.devices:
        lines.insert(1, f"warning: -ngl {args.n_gpu_layers} but no offload device (no GPU in this ggml build, no "
                        "--rpc): everything runs on the CPU")
    return lines
