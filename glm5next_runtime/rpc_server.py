"""glm5next-rpc-server: serve this machine's CPU as a ggml RPC device, as llama.cpp's rpc-server does, so that
glm5next-server / glm5next-cli / Model(rpc=[...]) on another process or machine can place layers on it (--rpc)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import _core

NO_AUTH_WARNING = ("glm5next-rpc-server: ggml's RPC protocol has no authentication and no encryption: whoever "
                   "reaches {endpoint} can allocate memory and run computations on this machine. Serve on loopback "
                   "or a trusted network only.")


def cache_dir() -> Path:
    """Where -c/--cache keeps large tensors between runs: $XDG_CACHE_HOME/glm5next/rpc (~/.cache/...)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glm5next" / "rpc"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="glm5next-rpc-server", description=__doc__)
    p.add_argument("-H", "--host", default="127.0.0.1", help="address to bind (127.0.0.1: this machine only)")
    p.add_argument("-p", "--port", type=int, default=50052, help="port to listen on (50052)")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="CPU threads for the computations (default: all cores)")
    p.add_argument("-c", "--cache", action="store_true",
                   help=f"cache large tensors on disk between runs, in {cache_dir()}")
    args = p.parse_args(argv)
    if not 1 <= args.port <= 65535:
        p.error(f"--port {args.port}: expected 1..65535")
    if args.threads < 1:
        p.error(f"--threads {args.threads}: must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    endpoint = f"{args.host}:{args.port}"
    print(NO_AUTH_WARNING.format(endpoint=endpoint), file=sys.stderr, flush=True)
    cache = ""
    if args.cache:
        cache_dir().mkdir(parents=True, exist_ok=True)
        cache = str(cache_dir())
    try:
        _core.serve_rpc(endpoint, args.threads, cache)  # blocks while serving
    except (ValueError, RuntimeError) as e:
        print(f"glm5next-rpc-server: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
