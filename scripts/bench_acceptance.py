#!/usr/bin/env python3
"""Draft-MTP acceptance and speed of a trained checkpoint on held-out code (issue 6's report).

Converts the checkpoint (default: the bundled models/glm5next-small) to GGUF with an f16 draft layer, takes the
held-out stdlib files of scripts/train/data.py (never trained on) that are long enough as prompts, and runs
glm5next-bench's draft-MTP rows on them: greedy, n_max 1..5, draft layer as stored (f16) and requantized to q8_0
and q4_0 at load, each next to the same rounds without drafts. Prints the held-out losses that training recorded,
then the bench table (acceptance per position, mean accepted length, speedup).

    python scripts/bench_acceptance.py [--checkpoint models/glm5next-small] [--prompts 8] [-d 384] [-n 128] [-t 2]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

from train import data

from glm5next_convert import convert
from glm5next_runtime import bench

ROOT = Path(__file__).resolve().parent.parent


def heldout_prompts(tokenizer: Tokenizer, n: int, min_tokens: int) -> list[Path]:
    """The first n held-out stdlib files (sorted by path) with at least min_tokens tokens."""
    _, held = data.split(data.stdlib_sources())
    chosen = []
    for f in held:
        texts = data.read_texts([f])
        if texts and len(tokenizer.encode(texts[0]).ids) >= min_tokens:
            chosen.append(f)
        if len(chosen) == n:
            return chosen
    raise SystemExit(f"only {len(chosen)} held-out files have {min_tokens} tokens; ask for fewer prompts or a smaller -d")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, default=ROOT / "models" / "glm5next-small")
    p.add_argument("--outtype", default="f16", help="GGUF type of the trunk (default f16)")
    p.add_argument("--prompts", type=int, default=8, help="held-out files used as prompts (default 8)")
    p.add_argument("-d", "--prompt-tokens", type=int, default=384, help="prompt length in tokens (default 384)")
    p.add_argument("-n", "--n-gen", type=int, default=128, help="tokens generated per prompt (default 128)")
    p.add_argument("--n-max", default="1,2,3,4,5", help="drafts per round, comma-separated (default 1..5)")
    p.add_argument("--draft-types", default="auto,q8_0,q4_0", help="draft layer types (auto = f16 as converted)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-r", "--repetitions", type=int, default=3)
    a = p.parse_args(argv)

    notes = a.checkpoint / "training.json"
    if notes.is_file():
        held = json.loads(notes.read_text())["heldout"]
        print(f"held-out loss (training.json): trunk {held['lm']:.3f}, draft steps "
              + ", ".join(f"{x:.3f}" for x in held["draft"]))
    prompts = heldout_prompts(Tokenizer.from_file(str(a.checkpoint / "tokenizer.json")), a.prompts, a.prompt_tokens)
    print("prompts (first", a.prompt_tokens, "tokens of):", " ".join(f.name for f in prompts), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        gguf = Path(tmp) / f"model-{a.outtype}.gguf"
        convert(a.checkpoint, gguf, outtype=a.outtype, mtp_type="f16")
        return bench.main(["-m", str(gguf), "-p", "0", "-n", str(a.n_gen), "-d", str(a.prompt_tokens),
                           "-t", str(a.threads), "-r", str(a.repetitions), "--spec-n-max", a.n_max,
                           "--spec-draft-type", a.draft_types, "--spec-prompts", *map(str, prompts)])


if __name__ == "__main__":
    raise SystemExit(main())
