"""glm5next-cli: one-shot generation. Streams the text to stdout as it is generated, then prints the timings and
the draft acceptance to stderr (so stdout is the text alone).

    glm5next-cli -m FILE -p PROMPT [-n N] [-c 4096] [-t N] [--temp 0.8] [--seed S] [--spec-type draft-mtp] ...

Exit status: 0 done, 1 the model does not load or the prompt does not fit, 2 bad flags, 130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from .model import Model
from .model_args import add_model_args, describe_model, list_devices_if_asked, model_kwargs, request_seed

PROG = "glm5next-cli"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parsed flags; exits 2 with a usage message for bad or not yet supported ones (0 after --list-devices)."""
    list_devices_if_asked(PROG, argv)
    p = argparse.ArgumentParser(prog=PROG, description="Generate text from a prompt with a glm5next GGUF file.")
    add_model_args(p)
    p.add_argument("-p", "--prompt", required=True, help="the prompt (control tokens such as <|user|> parsed)")
    p.add_argument("-n", "--n-predict", type=int, default=-1, metavar="N",
                   help="tokens to generate (-1: until the end of generation or the context)")
    p.add_argument("--temp", type=float, default=0.8, help="temperature (0.8; <= 0: greedy)")
    p.add_argument("--top-k", type=int, default=40, help="top-k sampling (40; 0: off)")
    p.add_argument("--top-p", type=float, default=0.95, help="top-p sampling (0.95; 1.0: off)")
    p.add_argument("--min-p", type=float, default=0.05, help="min-p sampling (0.05; 0.0: off)")
    args = p.parse_args(argv)
    if args.n_predict < -1:
        p.error(f"-n/--n-predict {args.n_predict}: must be >= -1")
    return args


def report(metrics: dict, finish_reason: str, out: TextIO) -> None:
    """Timings and, when speculation ran, the acceptance (per position, mean accepted length) to `out`."""
    m = metrics
    print(f"prompt eval: {m['n_prompt_tokens']} tokens in {m['prompt_ms']:.2f} ms "
          f"({m['prompt_tokens_per_s']:.2f} tokens/s)", file=out)
    print(f"generation:  {m['n_generated']} tokens in {m['decode_ms']:.2f} ms "
          f"({m['decode_tokens_per_s']:.2f} tokens/s), finish: {finish_reason}", file=out)
    if m["n_drafts"]:
        per_position = " ".join(f"{rate:.3f}" for rate in m["acceptance_per_position"])
        print(f"draft-mtp:   {m['n_drafts']} rounds, {m['n_drafted']} drafted, {m['n_accepted']} accepted; "
              f"acceptance per position: {per_position}; mean accepted length {m['mean_accepted_length']:.3f}; "
              f"draft {m['draft_ms']:.2f} ms, verify {m['verify_ms']:.2f} ms", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        model = Model(**model_kwargs(args))
        for line in describe_model(model, args):
            print(line, file=sys.stderr)
        max_tokens = model.n_ctx if args.n_predict < 0 else args.n_predict
        stream = model.generate(args.prompt, max_tokens=max_tokens, temperature=args.temp, top_k=args.top_k,
                                top_p=args.top_p, min_p=args.min_p, seed=request_seed(args), stream=True)
        for piece in stream:
            sys.stdout.write(piece)
            sys.stdout.flush()
    except ValueError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    sys.stdout.write("\n")
    sys.stdout.flush()
    assert stream.result is not None
    report(stream.result.metrics, stream.result.finish_reason, sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
