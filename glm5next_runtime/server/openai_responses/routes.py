"""OpenAI's Responses API on this server's engine:

    POST /v1/responses, /responses   a response (replies.py), streamed or whole
    POST /v1/responses/input_tokens, /responses/input_tokens  {"input_tokens": N}: the prompt it would generate from

The body becomes a chat request (schemas.py) and goes the server's one way (../pipeline.py: template workers,
control-token guard, slots, prompt cache, draft-MTP, cancellation, metrics). Errors
are OpenAI-shaped, as on the other /v1 routes. Responses are not stored: there is no GET /v1/responses/{id}.
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...chat import opens_think_block
from ..chat_bridge import reply_tools
from ..pipeline import RequestPipeline
from .replies import ResponsesReply
from .schemas import ResponsesRequest


def create_responses_router(path: RequestPipeline) -> APIRouter:
    """The Responses API routes (module docstring) on `path`'s slots."""
    router = APIRouter()
    config = path.config

    @router.post("/v1/responses")
    @router.post("/responses")
    async def responses(request: Request) -> Response:
        body, chat, prompt, ids = await path.bridged_chat(request, ResponsesRequest)
        echo = {"instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
                "temperature": chat.temperature, "top_p": chat.top_p,
                "reasoning": {"effort": chat.reasoning_effort, "summary": None},
                "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
                "tool_choice": "auto" if body.tool_choice is None else body.tool_choice,
                "parallel_tool_calls": chat.parallel_tool_calls}
        reply = ResponsesReply(body.model or config.model_name, chat.splits_reasoning() and opens_think_block(prompt),
                               echo, reply_tools(chat), chat.timings_per_token)
        return await path.generate(request, chat, ids, reply, "responses")

    @router.post("/v1/responses/input_tokens")
    @router.post("/responses/input_tokens")
    async def input_tokens(request: Request) -> dict[str, int]:
        *_, ids = await path.bridged_chat(request, ResponsesRequest)
        return {"input_tokens": len(ids)}

    return router
