"""Google Cloud Vertex AI's prediction protocol for custom containers, as llama-server has it (server-http.cpp,
register_gcp_compat): with AIP_MODE=PREDICTION in the environment,

    POST $AIP_PREDICT_ROUTE (/predict)   {"instances": [...]} -> {"predictions": [...]}
    GET  $AIP_HEALTH_ROUTE               the /health answer (only when the variable is set)

and AIP_HTTP_PORT (8080) replaces --port. Each instance is the body of one of this server's endpoints plus
"@requestFormat", which names the endpoint: its path ("/v1/chat/completions") or llama-server's camelCase alias of
it (the path without /v1, each part after / - _ capitalized: "chatCompletions", "applyTemplate"). The instances run
at once, each as its own request through the whole server (API key, body limit, slots), streaming turned off, and
each prediction is that request's JSON answer, an error included ({"error": {...}}); an instance that is not an
object or names no endpoint is such an error. At most MAX_INSTANCES per request; a body without an `instances`
list is a 400.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute
from starlette.types import Message, Receive, Scope

from ..errors import APIError

log = logging.getLogger("glm5next.server")
MAX_INSTANCES = 128  # llama-server's
SCOPE_KEYS = ("type", "asgi", "http_version", "scheme", "server", "client", "root_path", "app", "state")


@dataclass(frozen=True)
class VertexSettings:
    """The AIP_* variables: predict_route, health_route (None: no extra health route), port."""
    predict_route: str = "/predict"
    health_route: str | None = None
    port: int = 8080

    @staticmethod
    def from_env(env: Mapping[str, str]) -> VertexSettings | None:
        """The settings when env has AIP_MODE=PREDICTION, else None. Raises ValueError naming a bad AIP_HTTP_PORT."""
        if env.get("AIP_MODE", "") != "PREDICTION":
            return None
        port = env.get("AIP_HTTP_PORT") or "8080"
        if not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"AIP_HTTP_PORT {port!r}: not a port number")
        return VertexSettings(leading_slash(env.get("AIP_PREDICT_ROUTE") or "/predict"),
                              leading_slash(env["AIP_HEALTH_ROUTE"]) if env.get("AIP_HEALTH_ROUTE") else None,
                              int(port))


def leading_slash(path: str) -> str:
    return path if path.startswith("/") else "/" + path


def request_format(path: str) -> str:
    """llama-server's camelCase alias of a route path: "/v1/chat/completions" -> "chatCompletions",
    "/apply-template" -> "applyTemplate" (a path parameter and what follows it are left out)."""
    path = path[3:] if path.startswith("/v1") and len(path) > 3 else path
    path = path.split("{")[0].strip("/")
    return re.sub(r"[/_-]+(.)", lambda m: m.group(1).upper(), path)


def api_routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    """The endpoint routes among `routes`, in order, those of included routers too (FastAPI keeps an included
    router as one entry, its routes in original_router; this app's routers have no prefix)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (router := getattr(route, "original_router", None)) is not None:
            yield from api_routes(router.routes)


def add_vertex_routes(app: FastAPI, settings: VertexSettings) -> None:
    """The routes of the module docstring on `app` (after its other routes: the aliases are theirs). Raises
    ValueError when the predict route is one of the server's own paths (llama-server exits then too)."""
    routes = list(api_routes(app.routes))
    paths = {r.path: r for r in routes}
    if settings.predict_route in paths:
        raise ValueError(f"AIP_PREDICT_ROUTE {settings.predict_route}: conflicts with a route of this server")
    aliases: dict[str, APIRoute] = {}
    for route in routes:
        aliases.setdefault(request_format(route.path), route)  # the first registration wins, as llama-server's
    if settings.health_route is not None:
        app.add_api_route(settings.health_route, paths["/health"].endpoint, methods=["GET"])

    async def predict(request: Request) -> dict[str, Any]:
        try:
            data = json.loads(await request.body())
        except ValueError as e:
            raise APIError(400, f"the body is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise APIError(400, "request body must be a JSON object")
        instances = data.get("instances")
        if not isinstance(instances, list):
            raise APIError(400, "request body must include an array field named instances")
        if len(instances) > MAX_INSTANCES:
            raise APIError(400, f"instances array exceeds maximum size of {MAX_INSTANCES}")
        answers = await asyncio.gather(*(one(request, instance) for instance in instances))
        return {"predictions": list(answers)}

    async def one(request: Request, instance: Any) -> Any:
        if not isinstance(instance, dict):
            return APIError(400, "each instance must be a JSON object").body()
        payload = dict(instance)
        fmt = payload.pop("@requestFormat", None)
        if not isinstance(fmt, str):
            return APIError(400, "each instance must include a string @requestFormat").body()
        route = aliases.get(fmt) or paths.get(fmt)
        if route is None:
            return APIError(400, f"no handler registered for @requestFormat: {fmt}").body()
        if "stream" in payload:
            log.warning("%s: an instance's stream field is ignored (the predict route does not stream)",
                        settings.predict_route)
            payload["stream"] = False
        method = "POST" if "POST" in route.methods else sorted(route.methods)[0]
        _, body = await call(request, method, route.path, json.dumps(payload).encode())
        if not body:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return body.decode("utf-8", errors="replace")

    app.add_api_route(settings.predict_route, predict, methods=["POST"])


async def call(request: Request, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    """The answer (status, body) of `app` to a request for `path` with `body`, made in-process with the headers of
    `request` (its credentials), whose client going away ends it too."""
    headers = [(k, v) for k, v in request.scope["headers"] if k not in (b"content-length", b"content-type")]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope: Scope = {k: request.scope[k] for k in SCOPE_KEYS if k in request.scope}
    scope |= {"method": method, "path": path, "raw_path": path.encode(), "query_string": b"", "headers": headers}
    sent = False
    parent: Receive = request.receive

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await parent()  # blocks until the client goes away

    status, chunks = 500, []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await request.app(scope, receive, send)
    return status, b"".join(chunks)
