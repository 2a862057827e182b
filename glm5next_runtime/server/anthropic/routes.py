"""Anthropic's Messages API on this server's engine:

    POST /v1/messages               a reply (replies.py), streamed or whole
    POST /v1/messages/count_tokens  {"input_tokens": N}: the prompt /v1/messages would generate from, in tokens

The body becomes a chat request (schemas.py) and goes the server's one way (../pipeline.py: template workers,
control-token guard, slots, prompt cache, draft-MTP, cancellation, metrics).
Errors on these routes are in Anthropic's shape ({"type": "error", "error": {"type", "message"}}); those answered
before a route runs (--api-key's 401, --max-body-mib's 413, an unknown path) keep the server's OpenAI shape.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from ...chat import opens_think_block
from ..chat_bridge import reply_tools
from ..errors import INTERNAL, APIError
from ..pipeline import RequestPipeline
from ..token_text import token_text
from .replies import AnthropicReply, anthropic_error
from .schemas import CountTokensRequest, MessagesRequest

log = logging.getLogger("glm5next.server")


class AnthropicRoute(APIRoute):
    """A route whose errors are answered in Anthropic's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def shaped(request: Request) -> Response:
            try:
                return await handler(request)
            except APIError as e:
                return JSONResponse(anthropic_error(e), status_code=e.status)
            except ClientDisconnect:
                raise  # ../errors.py answers it (nobody reads the answer)
            except Exception:
                log.exception("%s %s failed", request.method, request.url.path)
                return JSONResponse(anthropic_error(APIError(500, INTERNAL)), status_code=500)

        return shaped


def create_anthropic_router(path: RequestPipeline) -> APIRouter:
    """The Messages API routes (module docstring) on `path`'s slots."""
    router = APIRouter(route_class=AnthropicRoute)
    config, tokenizer = path.config, path.first.tokenizer

    @router.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body, chat, prompt, ids = await path.bridged_chat(request, MessagesRequest)
        reply = AnthropicReply(body.model or config.model_name, opens_think_block(prompt),
                               body.stop_sequences or [], render, reply_tools(chat))
        return await path.generate(request, chat, ids, reply, "messages")

    @router.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> dict[str, int]:
        *_, ids = await path.bridged_chat(request, CountTokensRequest)
        return {"input_tokens": len(ids)}

    def render(ids: list[int]) -> str:
        return token_text(tokenizer, ids, config.special)

    return router
