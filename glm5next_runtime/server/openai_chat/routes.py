"""OpenAI's chat completions and completions on this server's engine:

    POST /v1/chat/completions, /chat/completions   a chat reply (replies.py), streamed or whole
    POST /v1/chat/completions/input_tokens         {"input_tokens": N}: the prompt the chat would generate from
    POST /v1/completions                           a raw prompt's completion (/completion, no /v1, is native/'s)
    GET  /v1/models, /models                       the served model under its name and aliases

Both go the server's one way (../pipeline.py); errors are OpenAI-shaped (../errors.py).
"""
from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...chat import opens_think_block
from ...tool_calls import argument_schemas
from ..choices import merge_choices
from ..errors import APIError
from ..pipeline import RequestPipeline
from ..schemas import ChatRequest
from ..threads import in_thread
from ..tool_replies import ToolCalls
from .replies import ChatReply, CompletionReply
from .schemas import CompletionRequest


def create_openai_router(path: RequestPipeline, started: int) -> APIRouter:
    """The routes of the module docstring, on `path`'s slots; started: the server's start (Unix seconds), the
    model's `created`."""
    router = APIRouter()
    config, first, pieces = path.config, path.first, path.pieces

    @router.get("/v1/models")
    @router.get("/models")
    async def models() -> dict[str, Any]:
        meta = {"n_ctx": first.n_ctx, "n_vocab": first.n_vocab, "spec_type": first.spec_type,
                "slots": path.pool.size}
        return {"object": "list", "data": [{"id": config.model_name, "aliases": list(config.aliases),
                                            "tags": list(config.tags), "object": "model", "created": started,
                                            "owned_by": "glm5next", "meta": meta}]}

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await path.read_body(request, CompletionRequest)
        prompts = [await in_thread(path.tokenize_prompt, p) if isinstance(p, str) else list(p)
                   for p in body.prompts()]
        return await path.generate_all(request, body, prompts, lambda _i: CompletionReply(
            body.model or config.model_name, pieces.for_request(body.post_sampling_probs), body.include_usage()),
            "completions",
            partial(merge_choices, per_prompt=body.choices()))

    @router.post("/v1/chat/completions")
    @router.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await path.read_body(request, ChatRequest)
        prompt, ids = await in_thread(path.render_chat, body)
        if (field := body.grammar_field()) and opens_think_block(prompt):
            raise APIError(400, f"{field}: the prompt opens a think block, which the grammar would not let the model "
                           "close; leave chat_template_kwargs.enable_thinking out (a grammar turns thinking off)")
        tools = body.active_tools()
        return await path.generate_all(request, body, [ids], lambda _i: ChatReply(
            body.model or config.model_name, pieces.for_request(body.post_sampling_probs),
            body.splits_reasoning() and opens_think_block(prompt),
            body.include_usage(), ToolCalls(argument_schemas(tools), body.parallel_tool_calls) if tools else None),
            "chat_completions", partial(merge_choices, per_prompt=body.choices()))

    @router.post("/v1/chat/completions/input_tokens")
    @router.post("/chat/completions/input_tokens")
    async def chat_input_tokens(request: Request) -> dict[str, int]:
        # llama-server's: the prompt /v1/chat/completions would generate from, in tokens
        _prompt, ids = await in_thread(path.render_chat, await path.read_body(request, ChatRequest))
        return {"input_tokens": len(ids)}

    return router
