#!/usr/bin/env python3
"""Train a small GLM-5.3-Flash (`glm5next`) of the exact architecture on the CPU, on the Python stdlib's sources.

KDA and DSA layers (kpool indexer), mHC, dense + MoE FFNs, and the NextN draft head trained on the token after
next (optionally more draft steps under index sharing): the modules of scripts/train/ (checked against
transformers by tests/scripts/test_train_modules.py). The tokenizer is a byte-level BPE trained on the same training files
with GLM's special tokens, split regex and chat template (make_checkpoint.py's). The result is a hub-layout
checkpoint (bf16) that transformers loads and glm5next_convert converts, with training.json (settings, losses).

    python scripts/train_small.py --out models/glm5next-small --minutes 55
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, replace

import torch
from tqdm import tqdm

from make_checkpoint import CheckpointSpec, text_config, train_tokenizer
from train import data, hub
from train.memory import keep_freed_memory
from train.model import Glm5NextTrain, init_weights
from train.moe import MoE
from train.objective import losses

# CheckpointSpec fields per size. "small": deeper rather than wider; index_topk far below the training sequence
# length so that sparse selection decides what most rows attend; ~24 MB in bf16.
SIZES: dict[str, dict] = {
    "small": {"hidden_size": 192, "num_hidden_layers": 12, "layer_pattern": "KKKD" * 3, "first_k_dense_replace": 1,
              "intermediate_size": 512, "num_attention_heads": 4, "linear_head_dim": 48, "q_lora_rank": 96,
              "kv_lora_rank": 128, "qk_nope_head_dim": 48, "v_head_dim": 48, "index_n_heads": 4,
              "index_head_dim": 32, "index_topk": 128, "index_kpool": 4, "n_routed_experts": 8,
              "num_experts_per_tok": 2, "moe_intermediate_size": 96, "swiglu_limit": 10.0,
              "tokenizer_vocab": 4069},
    # the smoke test's size (seconds per step)
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "layer_pattern": "KD", "intermediate_size": 64,
             "num_attention_heads": 2, "linear_head_dim": 16, "q_lora_rank": 16, "kv_lora_rank": 32,
             "qk_nope_head_dim": 16, "v_head_dim": 16, "index_n_heads": 2, "index_head_dim": 16, "index_topk": 16,
             "index_kpool": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
             "tokenizer_vocab": 384},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="models/glm5next-small", help="checkpoint directory (replaced at the end)")
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                   help="any CheckpointSpec field on top of --size, e.g. --set num_hidden_layers=8")
    p.add_argument("--minutes", type=float,
                   help="training time budget: the schedule ends when it is spent (data preparation, the final "
                        "evaluation and saving come on top, about half a minute)")
    p.add_argument("--steps", type=int, help="training steps (the schedule ends after them)")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30, help="steps of linear warmup")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--mtp-steps", type=int, default=1, help="draft steps in the loss (>1: index-shared steps)")
    p.add_argument("--mtp-weight", type=float, default=0.3, help="weight of the draft loss (DeepSeek-V3's lambda)")
    p.add_argument("--balance-rate", type=float, default=1e-3, help="MoE router bias step per training step")
    p.add_argument("--eval-every", type=int, default=100, help="steps between held-out evaluations")
    p.add_argument("--eval-windows", type=int, default=32, help="held-out windows of --seq-len tokens")
    p.add_argument("--max-files", type=int, help="train on the first N stdlib files only (smoke tests)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.minutes is None and a.steps is None:
        p.error("give --minutes, --steps or both")
    return a


def spec_of(a: argparse.Namespace) -> CheckpointSpec:
    fields = dict(SIZES[a.size])
    for kv in a.set:
        k, v = kv.split("=", 1)
        fields[k] = json.loads(v)
    return replace(CheckpointSpec(), **fields, seed=a.seed, dtype="bf16", nextn=True)


def lr_at(a: argparse.Namespace, step: int, progress: float) -> float:
    """Linear warmup over --warmup steps, then cosine from --lr to --lr/10 over the run's progress (0..1)."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    return a.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0))))


@torch.no_grad()
def evaluate(model: Glm5NextTrain, windows: torch.Tensor, a: argparse.Namespace) -> dict:
    """Held-out mean losses (trunk; draft per step) over `windows` [n, seq], in eval mode."""
    model.eval()
    batches = windows.split(a.batch)
    parts = [losses(model, w, a.mtp_steps) for w in batches]
    model.train()

    def mean(values) -> float:  # weighted by windows: the last batch may be short
        return sum(float(v) * len(w) for v, w in zip(values, batches)) / len(windows)

    return {"lm": mean(p.lm for p in parts), "draft": [mean(p.draft[k] for p in parts) for k in range(a.mtp_steps)]}


def optimizer(model: Glm5NextTrain, a: argparse.Namespace) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on norms, mHC base/scale, A_log, dt_bias, biases)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    keep_freed_memory()
    torch.set_num_threads(a.threads)
    spec = spec_of(a)

    files = data.stdlib_sources()
    train_files, held_files = data.split(files)
    train_texts = data.read_texts(train_files[: a.max_files])
    tok = train_tokenizer(spec.tokenizer_vocab, train_texts)
    eos = tok.token_to_id("<|endoftext|>")
    train_stream = data.encode(tok, train_texts, eos)
    held = data.eval_windows(data.encode(tok, data.read_texts(held_files), eos), a.seq_len, a.eval_windows)
    print(f"corpus: {len(train_texts)} files, {len(train_stream):,} training tokens; held out: {len(held_files)} "
          f"files, {held.numel():,} evaluation tokens", flush=True)

    model = Glm5NextTrain(text_config(spec))
    init_weights(model, seed=a.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters ({2 * n_params / 1e6:.1f} MB in bf16)", flush=True)
    opt = optimizer(model, a)
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    gen = torch.Generator().manual_seed(a.seed)

    history, step, tokens, start = [], 0, 0, time.time()
    bar = tqdm(total=a.steps, unit="step", dynamic_ncols=True, mininterval=2)
    while True:
        elapsed = time.time() - start
        progress = max(step / a.steps if a.steps else 0.0, elapsed / (60 * a.minutes) if a.minutes else 0.0)
        if progress >= 1.0:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(a, step, progress)
        ids = data.random_windows(train_stream, a.batch, a.seq_len, gen)
        out = losses(model, ids, a.mtp_steps, a.mtp_weight)
        opt.zero_grad(set_to_none=True)
        out.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for m in moes:
            m.balance(a.balance_rate)
        step, tokens = step + 1, tokens + ids.numel()
        bar.update()
        bar.set_postfix(loss=f"{out.lm.item():.3f}", draft=f"{out.draft[0].item():.3f}",
                        idx=f"{out.indexer.item():.3g}", tok_s=f"{tokens / (time.time() - start):.0f}")
        if step % a.eval_every == 0:
            history.append({"step": step, "tokens": tokens, "seconds": round(time.time() - start, 1),
                            "train_lm": out.lm.item(), **evaluate(model, held, a)})
            bar.write(f"step {step}: held-out {history[-1]}")
    bar.close()
    seconds = time.time() - start
    final = evaluate(model, held, a)
    print(f"{step} steps, {tokens:,} tokens in {seconds / 60:.1f} min ({tokens / seconds:.0f} tokens/s); "
          f"held-out trunk loss {final['lm']:.3f}, draft loss {final['draft']}", flush=True)
    notes = {"args": vars(a), "spec": asdict(spec), "steps": step, "tokens": tokens, "seconds": round(seconds, 1),
             "tokens_per_second": round(tokens / seconds, 1), "parameters": n_params,
             "train_files": len(train_texts), "heldout_files": len(held_files), "heldout": final,
             "history": history}
    out_dir = hub.save(model, a.out, spec, tok, notes)
    print(f"wrote {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
