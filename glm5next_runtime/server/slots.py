"""The server's -np slots: one Model per slot, so every sequence's caches are its own, and a first-come
first-served queue of the requests waiting for one."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..model import Model


class SlotPool:
    """Models lent to one request at a time. Use from the event loop only (the models themselves then run in
    worker threads, one thread per borrowed model)."""

    def __init__(self, models: Sequence[Model]):
        """models: one per slot, all loaded from the same file with the same settings (>= 1)."""
        if not models:
            raise ValueError("a slot pool needs at least one model")
        self.models = list(models)
        self._free: asyncio.Queue[Model] = asyncio.Queue()
        for model in self.models:
            self._free.put_nowait(model)
        self.waiting = 0  # requests queued for a slot

    @property
    def size(self) -> int:
        return len(self.models)

    @property
    def idle(self) -> int:
        return self._free.qsize()

    async def acquire(self) -> Model:
        """Wait for a free slot (in arrival order) and take it; give it back with release()."""
        self.waiting += 1
        try:
            return await self._free.get()
        finally:
            self.waiting -= 1

    def release(self, model: Model) -> None:
        """Give back a slot. Its model may still hold the last sequence: its next generate() resets it."""
        self._free.put_nowait(model)
