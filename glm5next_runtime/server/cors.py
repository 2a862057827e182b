"""CORS as llama-server answers it (server-http.cpp), so that a browser front-end on another origin can call the
server. --cors-origins decides Access-Control-Allow-Origin, on every response: "*" (the default) with credentials
allowed reflects the request's Origin, "*" without them answers "*", "localhost" reflects only a localhost origin
(host localhost, 127.0.0.1 or ::1, any scheme and port), anything else is sent as given. Any OPTIONS request (a
browser's preflight) is answered 200 with --cors-credentials, --cors-methods and --cors-headers before anything else
runs, --api-key included: browsers send preflights without credentials. Header names are spelled as llama-server
spells them (clients that read headers into a plain dict look them up that way)."""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ALLOW_ORIGIN = b"Access-Control-Allow-Origin"
LOCALHOST = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class CORSPolicy:
    """llama-server's --cors-origins, --cors-methods, --cors-headers and --cors-credentials (its defaults)."""
    origins: str = "*"
    methods: str = "GET, POST, DELETE, OPTIONS"
    headers: str = "*"
    credentials: bool = True

    def allow_origin(self, origin: bytes | None) -> bytes | None:
        """The Access-Control-Allow-Origin value for a request from `origin` (None: no header)."""
        if self.origins == "*" and self.credentials:
            return origin
        if self.origins == "localhost":
            return origin if origin is not None and is_localhost(origin) else None
        return self.origins.encode("latin-1")

    def preflight(self) -> list[tuple[bytes, bytes]]:
        return [(b"Access-Control-Allow-Credentials", b"true" if self.credentials else b"false"),
                (b"Access-Control-Allow-Methods", self.methods.encode("latin-1")),
                (b"Access-Control-Allow-Headers", self.headers.encode("latin-1"))]


def is_localhost(origin: bytes) -> bool:
    """Whether an Origin (scheme://host[:port]) names this machine's loopback."""
    try:
        return urlsplit(origin.decode("latin-1")).hostname in LOCALHOST
    except ValueError:
        return False


class CORSMiddleware:
    """Add it last (outermost): it must answer preflights before authentication, and mark every response."""

    def __init__(self, app: ASGIApp, policy: CORSPolicy = CORSPolicy()):
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = self.policy.allow_origin(dict(scope["headers"]).get(b"origin"))
        allow = [(ALLOW_ORIGIN, origin)] if origin is not None else []
        if scope["method"] == "OPTIONS":
            headers = [*allow, *self.policy.preflight(), (b"content-type", b"text/html"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_marked(message: Message) -> None:
            if message["type"] == "http.response.start" and allow:
                message = {**message, "headers": [*message.get("headers", []), *allow]}
            await send(message)

        await self.app(scope, receive, send_marked)
