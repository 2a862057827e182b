"""A generation's response on its way out: the events of a stream (reply_events, the response an EventStream) and
the wait for a whole one (finish_unless). pipeline.py makes both."""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ..generate import GenerationResult, GenerationStream, PromptProgress
from ..scheduler import ScheduledGeneration
from .errors import INTERNAL, APIError
from .replies import Reply
from .stopping import ShuttingDown
from .threads import in_thread

log = logging.getLogger("glm5next.server")

STOP_POLL_S = 0.05  # how often a generation answered whole looks at its client and the server's stopping


class EventStream(StreamingResponse):
    """text/event-stream that gives its slot back once the response is over, however it ends (done, client
    gone, error), and only then: `release` (a coroutine) drops the generation and waits until the scheduler is done
    with the slot's sequence."""

    def __init__(self, events: AsyncIterator[str], release: Callable[[], Awaitable[None]]):
        super().__init__(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._events = events
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._events.aclose()  # never started (client gone before the headers) or cut off
            await self._release()


async def reply_events(stream: GenerationStream, reply: Reply, cut: threading.Event,
                       observe: Callable[[GenerationResult], None], cancelled: Callable[[], None]) -> AsyncIterator[str]:
    """The server-sent events of `stream` in `reply`'s shapes: its start, one or more per text piece (and prompt
    progress, when asked for), its end. `cut` set (the server stops) ends the stream with an error event, as does a
    failure mid-stream (the headers are out: no status can say it); `observe` gets the finished generation's result
    (metrics), `cancelled` is called when the client went away (Starlette cut the stream)."""
    try:
        for chunk in reply.start():
            yield reply.event(chunk)
        try:
            while (piece := await in_thread(next, stream, None)) is not None:
                if cut.is_set():
                    yield reply.error_event(ShuttingDown(": the generation was stopped"))
                    return
                for chunk in reply.progress(piece) if isinstance(piece, PromptProgress) else reply.piece(piece):
                    yield reply.event(chunk)
        except Exception:
            log.exception("generation failed mid-stream")
            yield reply.error_event(APIError(500, INTERNAL))
            return
        assert stream.result is not None
        observe(stream.result)
        for chunk in reply.end(stream.result):
            yield reply.event(chunk)
        if reply.stream_end is not None:
            yield reply.stream_end
    except (asyncio.CancelledError, GeneratorExit):
        cancelled()
        raise


def finish_unless(handle: ScheduledGeneration, stops: Sequence[threading.Event]) -> GenerationResult | None:
    """Wait for the generation's end and return its result, or None when one of `stops` is set first (looked at
    every STOP_POLL_S). It waits on the generation's end, not piece by piece: a waiter woken at every token would take
    the CPU from the scheduler's threads that many times a step (on 2 cores, a ggml thread preempted leaves the other
    spinning at the graph's barriers)."""
    while not handle.wait(STOP_POLL_S):
        if any(stop.is_set() for stop in stops):
            return None
    return handle.stream.finish()
