"""The RAM prompt cache shared by the slots (llama-server's --cache-ram): when a request is about to overwrite a
slot's sequence with a prompt that keeps little of it, the sequence is saved (Model.save_state: tokens, cache rows,
context checkpoints) into host memory first; and a request whose prompt shares a longer prefix with a cached
sequence than with its slot's loads that one into the slot before it runs, so that it evaluates only the rest.

With -np 1 this is what lets two conversations alternate without either evaluating its whole history again. Entries
are dropped least recently used first to stay within the limit; an entry loaded into a slot leaves the cache (the
slot holds it now, and it is saved again when overwritten).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import Model
from .slots import SLOT_PROMPT_SIMILARITY, common_prefix

DEFAULT_CACHE_RAM_MIB = 8192  # llama-server's default


@dataclass(frozen=True)
class CacheEntry:
    tokens: tuple[int, ...]
    state: bytes  # Model.save_state()


class PromptCache:
    """Saved sequences in host memory, at most `limit_bytes` in all (None: no limit). Thread-safe: slots swap in
    their own worker threads."""

    def __init__(self, limit_bytes: int | None):
        self.limit_bytes = limit_bytes
        self._entries: OrderedDict[tuple[int, ...], CacheEntry] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def prepare(self, model: Model, prompt: Sequence[int], resume: bool = True) -> None:
        """Before `model` (a slot, owned by the caller's thread) runs `prompt` (ids): save its sequence when the
        prompt keeps less than SLOT_PROMPT_SIMILARITY of it, and, with `resume` (the request's cache_prompt), load
        the cached sequence sharing the longest prefix with the prompt when that prefix is longer than the slot's
        (saving the slot's first)."""
        tokens = model.tokens
        kept = common_prefix(tokens, prompt) if resume else 0
        best = self._take_best(prompt, better_than=kept) if resume else None
        if tokens and (best is not None or kept < SLOT_PROMPT_SIMILARITY * len(tokens)):
            self._put(CacheEntry(tuple(tokens), model.save_state()))
        if best is not None:
            model.load_state(best.state)

    def _take_best(self, prompt: Sequence[int], better_than: int) -> CacheEntry | None:
        with self._lock:
            best, best_n = None, better_than
            for entry in self._entries.values():
                n = common_prefix(entry.tokens, prompt)
                if n > best_n:
                    best, best_n = entry, n
            if best is not None:
                del self._entries[best.tokens]
            return best

    def _put(self, entry: CacheEntry) -> None:
        if self.limit_bytes is not None and len(entry.state) > self.limit_bytes:
            return
        with self._lock:
            self._entries.pop(entry.tokens, None)
            self._entries[entry.tokens] = entry
            if self.limit_bytes is None:
                return
            total = sum(len(e.state) for e in self._entries.values())
            while total > self.limit_bytes:
                _, dropped = self._entries.popitem(last=False)
                total -= len(dropped.state)
