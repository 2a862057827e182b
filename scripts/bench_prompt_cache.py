"""Time to first token of a multi-turn chat with and without the prompt cache (issue 12's figure).

    .venv/bin/python scripts/bench_prompt_cache.py -m model.gguf [-t 2] [--system 1500] [--user 300] [--reply 128]
        [--turns 4] [-c 8192]

Each turn's prompt is the previous prompt, the previous reply (the generated ids) and a new user message (text
from the model's own vocabulary, fixed seed), as a chat client resends it. Every turn runs twice on two sequences
of one loaded model: one that keeps its cache (cache_prompt=True) and one that starts over (cache_prompt=False);
the table gives per turn the prompt tokens, those resumed from the cache, the prompt time of each and their ratio,
the mean accepted length of each (draft-MTP after a cache hit drafts as without one) and whether the two generated
the same tokens (on quantized files of the bench preset's widths they may not: rows resumed from the cache were
computed by decode and verify passes, the fresh sequence computes them in a prefill ubatch, and ggml rounds the
two differently). Prints one table; the next turn continues the cached sequence's reply.
"""
from __future__ import annotations

import argparse
import random
import sys

from glm5next_runtime import Model


def words(model: Model, n_tokens: int, rng: random.Random) -> list[int]:
    """About n_tokens ids of plain text built from the vocabulary's word-like tokens."""
    pool = [i for i, t in enumerate(model.tokenizer.tokens) if t.isalpha() and 3 <= len(t) <= 8] or list(range(64))
    return [rng.choice(pool) for _ in range(n_tokens)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx-size", type=int, default=8192)
    p.add_argument("--system", type=int, default=1500, help="system prompt tokens (1500)")
    p.add_argument("--user", type=int, default=300, help="tokens per user message (300)")
    p.add_argument("--reply", type=int, default=128, help="tokens generated per turn (128)")
    p.add_argument("--turns", type=int, default=4)
    args = p.parse_args(argv)

    cached = Model(args.model, n_ctx=args.ctx_size, n_threads=args.threads)
    fresh = cached.another_sequence()
    rng = random.Random(12)
    prompt = words(cached, args.system, rng) + words(cached, args.user, rng)
    print("| turn | prompt tokens | resumed | prompt ms (cache) | prompt ms (no cache) | ratio | accepted len "
          "(cache / no cache) | same tokens |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |")
    for turn in range(1, args.turns + 1):
        hit = cached.generate(prompt, max_tokens=args.reply, temperature=0, cache_prompt=True)
        miss = fresh.generate(prompt, max_tokens=args.reply, temperature=0, cache_prompt=False)
        a, b = hit.metrics, miss.metrics
        print(f"| {turn} | {a['n_prompt_tokens']} | {a['n_cached_tokens']} | {a['prompt_ms']:.1f} | "
              f"{b['prompt_ms']:.1f} | {b['prompt_ms'] / max(a['prompt_ms'], 1e-9):.1f}x | "
              f"{a['mean_accepted_length']:.2f} / {b['mean_accepted_length']:.2f} | "
              f"{'yes' if hit.tokens == miss.tokens else 'no'} |")
        prompt = prompt + hit.tokens + words(cached, args.user, rng)
        if len(prompt) + args.reply >= args.ctx_size:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
