"""`glm5next-convert HF_DIR --outfile X.gguf [--outtype ...] [--mtp-type ...] [--no-mtp | --mtp-only] [--arch ...]
[-t N]`"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from . import qtypes
from .checkpoint import ConversionError
from .converter import convert
from .hparams import ARCHES


@contextmanager
def _interrupts() -> Iterator[list[int]]:
    """While the conversion runs: SIGINT raises KeyboardInterrupt as usual and is also recorded in the yielded list,
    so that an interrupt another library swallowed (torch's C++ turns a KeyboardInterrupt raised inside its tensor
    construction into a TypeError, which the checkpoint reader reports as a ConversionError: seen in CI) still ends
    the run as an interrupt. Only where SIGINT has Python's default handler, in the main thread."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield seen
        return

    def on_sigint(signum, frame):
        seen.append(signum)
        signal.default_int_handler(signum, frame)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: list[str] | None = None) -> int:
    """Run the converter; returns the process exit code: 0 ok, 1 bad input or an OS error (one line on stderr
    naming the file, field, tensor or key), 2 a usage error (argparse). SIGTERM/SIGHUP/SIGINT end it as usual,
    leaving no partial output."""
    p = argparse.ArgumentParser(prog="glm5next-convert",
                                description="Convert a GLM-5.3-Flash Hugging Face checkpoint to GGUF.")
    p.add_argument("hf_dir", help="checkpoint directory (config.json, *.safetensors, tokenizer.json)")
    p.add_argument("--outfile", help="output path (default: HF_DIR/<name>-<outtype>.gguf)")
    types = [*qtypes.OUTTYPES, "auto"]
    p.add_argument("--outtype", default="auto", choices=types,
                   help="type of the large weights; auto keeps the source precision (FP8 -> bf16)")
    p.add_argument("--mtp-type", choices=list(qtypes.OUTTYPES),
                   help="type of the NextN (draft) layer's large weights (default: --outtype)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--no-mtp", action="store_true", help="trunk only: drop the NextN layer")
    g.add_argument("--mtp-only", action="store_true",
                   help="draft-only file: NextN layer + token_embd + output_norm + output")
    p.add_argument("--arch", default="glm5next", choices=list(ARCHES),
                   help="architecture string; glm5-next is the spelling llama.cpp loads")
    p.add_argument("-t", "--threads", type=int, default=None, metavar="N",
                   help="workers that read and quantize tensors while one writes (default: the machine's cores); "
                        "the output is the same bytes for any N")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    layout = "no-mtp" if a.no_mtp else "mtp-only" if a.mtp_only else "combined"
    with _interrupts() as interrupted:
        try:
            convert(a.hf_dir, a.outfile, outtype=a.outtype, mtp_type=a.mtp_type, layout=layout, arch=a.arch,
                    progress=not a.no_progress, log=lambda m: print(m, file=sys.stderr), threads=a.threads)
        except (ConversionError, OSError) as e:
            if interrupted:  # Ctrl-C, surfaced as another error (_interrupts): an interrupt all the same
                raise KeyboardInterrupt from e
            if isinstance(e, ConversionError):
                print(f"glm5next-convert: error: {e}", file=sys.stderr)
            else:  # the converter names its files itself; this is the net for an unforeseen OS error
                where = f"{e.filename}: " if e.filename else ""
                print(f"glm5next-convert: error: {where}{e.strerror or e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
