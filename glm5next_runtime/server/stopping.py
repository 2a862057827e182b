"""What requests meet while the server stops.

On SIGTERM or SIGINT uvicorn stops accepting connections, waits (up to its graceful timeout) for the open ones, then
cancels what is left: a request cancelled there gets a plain-text 500 and leaves a traceback in the log. So the
server acts first. On the signal, requests still queued for a slot, and any new one on a kept-alive connection, are
answered 503 (OpenAI-shaped, "the server is shutting down") at once; generations already running get `grace_s`
seconds to finish, then stop at their next piece of text (a 503, or an error event that ends a stream). uvicorn's
own timeout is set beyond the grace (main.py), so it finds nothing left to cancel.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import threading
from types import FrameType

from .errors import APIError
from .slots import SlotPool

log = logging.getLogger("glm5next.server")
GRACE_S = 5.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ShuttingDown(APIError):
    """503: a request the stopping server does not serve (any more)."""

    def __init__(self, detail: str = ""):
        super().__init__(503, f"the server is shutting down{detail}")


class Stopping:
    """The server's stopping state. `requested` and `cut` are threading.Events, so worker threads can read them:
    `requested` once stopping began, `cut` once running generations must end."""

    def __init__(self, pool: SlotPool, grace_s: float = GRACE_S):
        self.requested = threading.Event()
        self.cut = threading.Event()
        self._pool = pool
        self._grace_s = grace_s

    def begin(self) -> None:
        """Start stopping (on the event loop; idempotent): the slot queue closes, running generations are cut
        after the grace period."""
        if self.requested.is_set():
            return
        self.requested.set()
        waiting = self._pool.waiting
        self._pool.close()
        log.info("stopping: %d queued request(s) answered 503; running generations get %g s", waiting,
                 self._grace_s)
        asyncio.get_running_loop().call_later(self._grace_s, self.cut.set)

    def watch_signals(self) -> None:
        """Begin stopping on SIGINT / SIGTERM, then let the handler already there (uvicorn's) run as before. Call
        on the event loop in the main thread, at start-up: uvicorn puts its own handlers back when it ends."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            previous = signal.getsignal(sig)

            def handler(signum: int, frame: FrameType | None, previous=previous) -> None:
                loop.call_soon_threadsafe(self.begin)
                if callable(previous):
                    previous(signum, frame)
                elif previous == signal.SIG_DFL:
                    signal.signal(signum, signal.SIG_DFL)
                    signal.raise_signal(signum)

            signal.signal(sig, handler)
