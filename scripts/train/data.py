"""Training text: the Python standard library's own .py sources, split by file into training and held-out sets,
tokenized into one stream per set (files joined by <|endoftext|>)."""
from __future__ import annotations

import sysconfig
import zlib
from pathlib import Path

import torch


def stdlib_sources(root: str | Path | None = None) -> list[Path]:
    """Every .py file under the stdlib directory (site-packages excluded: it is not the stdlib), sorted."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted(f for f in root.rglob("*.py") if "site-packages" not in f.relative_to(root).parts)


def split(files: list[Path], root: str | Path | None = None, heldout_every: int = 50) -> tuple[list[Path], list[Path]]:
    """(training, held-out): a file is held out when crc32 of its path relative to the stdlib is 0 mod
    `heldout_every`; a fixed rule, so every run and machine with the same Python holds out the same files."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    held = [zlib.crc32(str(f.relative_to(root)).encode()) % heldout_every == 0 for f in files]
    return [f for f, h in zip(files, held) if not h], [f for f, h in zip(files, held) if h]


def read_texts(files: list[Path]) -> list[str]:
    """The files' text; the few that are not UTF-8 (test data for the tokenizer module) are left out."""
    texts = []
    for f in files:
        try:
            texts.append(f.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


def encode(tok, texts: list[str], separator: int) -> torch.Tensor:
    """One int64 stream [N] of the texts' ids, `separator` (the <|endoftext|> id) after each file."""
    ids: list[int] = []
    for e in tok.encode_batch(texts):
        ids += e.ids
        ids.append(separator)
    return torch.tensor(ids, dtype=torch.int64)


def random_windows(stream: torch.Tensor, batch: int, seq: int, gen: torch.Generator) -> torch.Tensor:
    """[batch, seq] windows of the stream at uniformly random offsets (seeded by `gen`)."""
    starts = torch.randint(0, len(stream) - seq + 1, (batch,), generator=gen)
    return torch.stack([stream[s: s + seq] for s in starts.tolist()])


def eval_windows(stream: torch.Tensor, seq: int, n: int) -> torch.Tensor:
    """Up to n windows [n', seq] spread evenly over the stream: the same tokens at every evaluation."""
    n = max(1, min(n, len(stream) // seq))
    step = (len(stream) - seq) // max(1, n - 1) if n > 1 else 0
    return torch.stack([stream[i * step: i * step + seq] for i in range(n)])
