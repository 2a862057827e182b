"""The server's -np slots: one Model per slot, each a sequence of one engine (Model.another_sequence: its caches are
its own; the slots' generations run batched, ../scheduler.py), and a first-come first-served queue of the requests
waiting for one. A request that finds several slots free takes the one whose
sequence shares the longest prefix with its prompt, provided that prefix is at least SLOT_PROMPT_SIMILARITY of the
sequence (llama-server's --slot-prompt-similarity, 0.5), else the least recently used slot: a shared template
header alone does not make another conversation's slot the best one to overwrite. A request may also ask for one
slot by id (llama-server's id_slot, the slot actions): it waits for that slot. Closing the pool (the server is
stopping) turns the waiting requests, and any later one, away with SlotsClosed."""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from ..model import Model


SLOT_PROMPT_SIMILARITY = 0.5


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SlotsClosed(Exception):
    """The pool is closed: the server is stopping and serves no more requests."""


class SlotPool:
    """Models lent to one request at a time. Use from the event loop only (the generations on them run on the
    scheduler's thread; what else a request does with its model, e.g. the prompt cache's saves, in a worker
    thread)."""

    def __init__(self, models: Sequence[Model]):
        """models: one per slot, all loaded from the same file with the same settings (>= 1)."""
        if not models:
            raise ValueError("a slot pool needs at least one model")
        self.models = list(models)
        self._free: deque[Model] = deque(self.models)
        # requests waiting, in arrival order: the slot each wants (None: any) and the future it gets it by
        self._waiters: deque[tuple[Model | None, asyncio.Future[Model]]] = deque()
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
        return sum(not w.done() for _, w in self._waiters)

    def is_free(self, model: Model) -> bool:
        """Whether slot `model` is idle."""
        return model in self._free

    async def acquire(self, prompt: Sequence[int] = (), slot: int | None = None) -> Model:
        """Wait for a free slot (in arrival order) and take it; give it back with release(). Of several free slots
        the one whose sequence shares the longest prefix with `prompt` (ids), when it is similar enough (module
        docstring), else the least recently used. `slot` (an index into models) waits for that slot.
        Raises SlotsClosed when the pool is closed, or closes while waiting."""
        if self.closed:
            raise SlotsClosed()
        wanted = None if slot is None else self.models[slot]
        if wanted is not None and wanted in self._free:
            self._free.remove(wanted)
            return wanted
        if wanted is None and self._free and not self.waiting:
            best = self._free[0]  # the least recently used
            shared = {id(m): common_prefix(m.tokens, prompt) for m in self._free}
            similar = [m for m in self._free if m.tokens and shared[id(m)] >= SLOT_PROMPT_SIMILARITY * len(m.tokens)]
            if similar:
                best = max(similar, key=lambda m: shared[id(m)])
            self._free.remove(best)
            return best
        waiter: asyncio.Future[Model] = asyncio.get_running_loop().create_future()
        entry = (wanted, waiter)
        self._waiters.append(entry)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(waiter.result())  # handed a slot just as the request was cancelled: pass it on
            raise
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def release(self, model: Model) -> None:
        """Give back a slot: to the first waiting request that takes any slot or this one. Its model keeps its
        sequence: a later prompt sharing a prefix resumes from it."""
        for entry in list(self._waiters):
            wanted, waiter = entry
            if waiter.done():
                self._waiters.remove(entry)
            elif wanted is None or wanted is model:
                self._waiters.remove(entry)
                waiter.set_result(model)
                return
        self._free.append(model)

    def close(self) -> None:
        """Serve no more requests: those waiting get SlotsClosed now, later ones at once. Slots in use stay theirs
        until released (idempotent)."""
        self.closed = True
        while self._waiters:
            _, waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(SlotsClosed())
