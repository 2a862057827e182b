"""--max-body-mib: an ASGI middleware that bounds the size of request bodies (413 in the OpenAI error shape).

A body whose Content-Length is over the limit is refused before any of it is read. Otherwise the body is counted
as it arrives (chunked uploads have no length): the chunk that crosses the limit raises BodyTooLarge from the
app's `receive`, so the route stops reading and the error handler answers 413. The 413 closes the connection, so
the server does not go on receiving the rest of the upload either.
"""
from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError

DEFAULT_MAX_BODY_MIB = 16


class BodyTooLarge(APIError):
    """A request body over the limit (HTTP 413)."""

    def __init__(self, limit: int):
        super().__init__(413, f"the request body is larger than the server's limit of {limit} bytes "
                              f"({limit / 2**20:g} MiB, --max-body-mib)")

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers={"Connection": "close"})


class BodyLimitMiddleware:
    """Refuses request bodies of more than `limit` bytes."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > self.limit:
            await BodyTooLarge(self.limit).response()(scope, receive, send)
            return
        await self.app(scope, self._counting(receive), send)

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        return counted
