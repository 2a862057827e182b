"""The server's -np slots: one Model per slot, so every sequence's caches are its own, and a first-come
first-served queue of the requests waiting for one. Closing the pool (the server is stopping) turns the waiting
requests, and any later one, away with SlotsClosed."""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from ..model import Model


class SlotsClosed(Exception):
    """The pool is closed: the server is stopping and serves no more requests."""


class SlotPool:
    """Models lent to one request at a time. Use from the event loop only (the models themselves then run in
    worker threads, one thread per borrowed model)."""

    def __init__(self, models: Sequence[Model]):
        """models: one per slot, all loaded from the same file with the same settings (>= 1)."""
        if not models:
            raise ValueError("a slot pool needs at least one model")
        self.models = list(models)
        self._free: deque[Model] = deque(self.models)
        self._waiters: deque[asyncio.Future[Model]] = deque()
        self.closed = False

    @property
    def size(self) -> int:
        return len(self.models)

    @property
    def idle(self) -> int:
        return len(self._free)

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return sum(not w.done() for w in self._waiters)

    async def acquire(self) -> Model:
        """Wait for a free slot (in arrival order) and take it; give it back with release(). Raises SlotsClosed
        when the pool is closed, or closes while waiting."""
        if self.closed:
            raise SlotsClosed()
        if self._free and not self.waiting:
            return self._free.popleft()
        waiter: asyncio.Future[Model] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(waiter.result())  # handed a slot just as the request was cancelled: pass it on
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self, model: Model) -> None:
        """Give back a slot. Its model may still hold the last sequence: its next generate() resets it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(model)
                return
        self._free.append(model)

    def close(self) -> None:
        """Serve no more requests: those waiting get SlotsClosed now, later ones at once. Slots in use stay theirs
        until released (idempotent)."""
        self.closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(SlotsClosed())
