"""--sleep-idle-seconds N, llama-server's sleep: after N seconds without a request the slots' sequences and the
model's weights are freed (Model.unload), and the next request that needs the model loads them again first
(Model.reload), transparently but for the time that takes.

What llama-server answers while asleep without waking (its handlers that do not touch the model: server-context.cpp,
create_response(true)) is served here from what stays in Python: GET /health, /v1/health, /props (`is_sleeping`
true), /models, /v1/models and /metrics (the counters as they were; a scrape starts a new throughput bucket as
always, and nothing runs meanwhile). Every other request, a CORS preflight and one turned away before a route runs
(--api-key's 401, --max-body-mib's 413) aside, wakes the server: generation, /tokenize, the token counts, /slots,
/apply-template, as in llama-server, whose tokenizer is part of the model. The idle time counts from the end of the
last request (a stream's last byte); the RAM prompt cache (--cache-ram) stays: it is host memory already, and the
reloaded model resumes from it as from any cached prompt.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio.to_thread
from starlette.types import ASGIApp, Receive, Scope, Send

from ..model import Model

log = logging.getLogger("glm5next.server")
# served while asleep without waking (llama-server's create_response(true) handlers)
WHILE_ASLEEP = {("GET", "/health"), ("GET", "/v1/health"), ("GET", "/props"), ("GET", "/models"),
                ("GET", "/v1/models"), ("GET", "/metrics")}
POLL_S = 0.25  # how often an asleep or busy server looks again: how late, at most, it falls asleep after going idle


class IdleSleep:
    """Unloads `models` (the slots: models[0] holds the weights the others share) after `idle_s` seconds without a
    request and reloads them for the next one. Use from the event loop: `run()` is the watcher (a task for the
    server's life), `awake()` wraps each request that needs the model."""

    def __init__(self, models: Sequence[Model], idle_s: float):
        """idle_s: > 0."""
        self._models = list(models)
        self.idle_s = idle_s
        self.sleeping = False
        self._in_flight = 0
        self._last = time.monotonic()
        self._lock = asyncio.Lock()  # one transition at a time; a request waits for a transition under way

    @asynccontextmanager
    async def awake(self) -> AsyncIterator[None]:
        """While the body runs the model is loaded and stays so (woken first if asleep). Raises what reloading
        raises (the request fails; the next one tries again)."""
        self._in_flight += 1  # before the lock: a watcher that has not decided yet sees the request
        try:
            async with self._lock:
                if self.sleeping:
                    log.info("waking up: loading the model again")
                    await anyio.to_thread.run_sync(self._reload)
                    self.sleeping = False
            yield
        finally:
            self._in_flight -= 1
            self._last = time.monotonic()

    async def run(self) -> None:
        """Put the server to sleep whenever it has been idle for idle_s seconds (until cancelled)."""
        while True:
            await asyncio.sleep(self._wait())
            if not self._due():
                continue
            async with self._lock:
                if not self._due():
                    continue
                log.info("idle for %g s: unloading the model (--sleep-idle-seconds)", self.idle_s)
                await anyio.to_thread.run_sync(self._unload)
                self.sleeping = True

    def _due(self) -> bool:
        return not self.sleeping and not self._in_flight and time.monotonic() - self._last >= self.idle_s

    def _wait(self) -> float:
        """Seconds until the server may be due to sleep (a short poll while asleep or busy)."""
        if self.sleeping or self._in_flight:
            return min(self.idle_s, POLL_S)
        return max(self.idle_s - (time.monotonic() - self._last), 0.0)

    def _unload(self) -> None:
        for model in self._models:
            model.unload()

    def _reload(self) -> None:
        first, *others = self._models
        first.reload()
        for model in others:
            model.reload(weights_of=first)


class SleepMiddleware:
    """Runs every request but those served while asleep (WHILE_ASLEEP) and CORS preflights inside
    `sleep.awake()`."""

    def __init__(self, app: ASGIApp, sleep: IdleSleep):
        self.app = app
        self.sleep = sleep

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in WHILE_ASLEEP or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        async with self.sleep.awake():
            await self.app(scope, receive, send)
