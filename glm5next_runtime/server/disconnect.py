"""Whether a request's client is still there, from the moment its body is read until its response starts.

Once the body is read, the only message left for the app on the connection is `http.disconnect` (uvicorn sends it
as soon as the client closes), so a task waits for it and then sets a threading.Event, which the worker thread
running the generation checks between pieces of text. A request still queued for a slot is taken out of the queue
as soon as its client leaves. A streaming response stops the watch before it starts: Starlette's StreamingResponse
listens for the disconnect itself (and cancels the stream).
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from contextlib import suppress
from types import TracebackType
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")


class ClientGone(Exception):
    """The client went away before its response."""


class DisconnectWatch:
    """`async with DisconnectWatch(request.receive) as watch:` watches the connection for the block's duration;
    `watch.gone` is set once the client has gone."""

    def __init__(self, receive: Receive):
        """receive: the request's ASGI receive, called only after the body has been read."""
        self._receive = receive
        self.gone = threading.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> DisconnectWatch:
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def __aexit__(self, _type: type[BaseException] | None, _exc: BaseException | None,
                        _tb: TracebackType | None) -> None:
        assert self._task is not None
        self._task.cancel()
        with suppress(asyncio.CancelledError):
            await self._task

    async def _watch(self) -> None:
        try:
            while (await self._receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a connection that cannot be read is as good as closed
            pass
        self.gone.set()

    async def unless_gone(self, awaitable: Awaitable[T]) -> T:
        """The result of `awaitable`, or ClientGone (the awaitable cancelled) when the client leaves first."""
        assert self._task is not None
        work = asyncio.ensure_future(awaitable)
        try:
            await asyncio.wait((work, self._task), return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                raise ClientGone()
            return work.result()
        finally:  # client gone, or this request cancelled: the work must not outlive it (e.g. take a slot)
            if not work.done():
                work.cancel()
                with suppress(asyncio.CancelledError):
                    await work
