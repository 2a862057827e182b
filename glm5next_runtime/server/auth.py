"""--api-key: an ASGI middleware that answers 401 before anything else runs (so a request without the key
learns nothing, not even whether its body parses)."""
from __future__ import annotations

import secrets
from collections.abc import Collection

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import APIError

# llama-server's public endpoints: load balancers and model pickers call them without a key
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/models", "/v1/models"})


class APIKeyMiddleware:
    """Lets a request through when it carries `Authorization: Bearer KEY` or `X-Api-Key: KEY` (llama-server
    accepts both), or asks for a public path."""

    def __init__(self, app: ASGIApp, api_key: str, public: Collection[str] = PUBLIC_PATHS):
        self.app = app
        self._key = api_key.encode()
        self._public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self._public and not self._authorized(scope):
            await APIError(401, "Invalid API Key").response()(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        headers = Headers(scope=scope)
        auth = headers.get("authorization", "")
        given = auth[len("Bearer "):] if auth.startswith("Bearer ") else headers.get("x-api-key", "")
        return secrets.compare_digest(given.encode(), self._key)
