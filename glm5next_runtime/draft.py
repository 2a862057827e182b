"""Inspection of the NextN (MTP) draft head: what it drafts after a prompt, step by step (docs/model.md, NextN
draft head and index_share_for_mtp_iteration), through the same draft chain the speculative round runs
(_core.DraftChain, csrc/runtime/draft_chain.h), with each step's token chosen greedily here."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import _core


@dataclass
class DraftResult:
    tokens: list[int]          # drafted ids, one per step (greedy chain)
    logits: np.ndarray         # float32 [n_steps, n_vocab]
    selected: list[set[int]]   # per step: the key positions the step attended


def selected_positions(pools: np.ndarray, pos: int, kpool: int, tail: bool) -> set[int]:
    """Key positions a row at `pos` attends: the rows of its chosen pools (int32, -1 = none) plus, with the tail
    on, the incomplete pool ending at `pos` (docs/model.md, Indexer), as the engine's graphs derive them."""
    return set(_core.selected_rows([int(p) for p in pools], pos, kpool, tail))


def draft(model, tokens: Sequence[int], n_steps: int, share: bool | None = None) -> DraftResult:
    """Draft `n_steps` tokens after a prompt.

    `tokens`: a prompt of T tokens followed by the token the trunk would emit next. The trunk runs over the T
    prompt tokens (the sequence is reset first); the draft cache gets the rows (h_p, x_{p+1}) for p < T-1; step 0
    is the row (h_{T-1}, tokens[T]) at position T-1; steps >= 1 are the rows (z_{k-1}, d_k), chained greedily.
    `share`: None follows the file's index_share_for_mtp_iteration; True makes steps >= 1 attend exactly step 0's
    selection; False runs the head's indexer at every step. Raises ValueError for fewer than 2 tokens, n_steps < 1
    or a file without a NextN layer.
    """
    if len(tokens) < 2 or n_steps < 1:
        raise ValueError("draft needs a prompt of >= 1 token plus the next token, and n_steps >= 1")
    hp = model.hparams
    if share is None:
        share = bool(hp["index_share_mtp"])
    kpool, tail = hp["idx_kpool"], hp["idx_select_tail"]
    chain = model.draft_chain(share)  # resets the model's sequence for the trunk pass below
    model.eval(list(tokens[:-1]))
    h = np.ascontiguousarray(model.hidden, dtype=np.float32)
    out = chain.begin(h, [int(t) for t in tokens[1:]], 0)
    result = DraftResult([], np.empty((n_steps, model.n_vocab), np.float32), [])
    for k in range(n_steps):
        if k > 0:
            out = chain.next(result.tokens[-1])
        result.tokens.append(int(np.argmax(out["logits"])))
        result.logits[k] = out["logits"]
        result.selected.append(selected_positions(out["pools"], chain.selection_pos, kpool, tail))
    return result
