"""llama-server's native endpoints, in its own shapes (not OpenAI's):

    POST /tokenize, /detokenize      the model's tokenizer (llama-server's token pieces)
    POST /apply-template             the prompt the chat endpoint would generate from (same template and guard)
    GET  /props, POST /props         server properties; POST only with --props, and it changes nothing
    GET  /slots                      every slot's state and last task (501 with --no-slots)
    POST /completion, /completions   the native completion (OpenAI's is /v1/completions)

The completion goes the server's one way (../pipeline.py: slots, prompt cache, cancellation, metrics), with
llama-server's completion reply (../completion_reply.py). Tokenizing runs in worker threads. The slot actions,
POST /slots/{id}?action=..., are slot_actions.py's.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...tokenizer import Tokenizer
from ...user_text import MARK
from ..build_info import BUILD_INFO
from ..choices import native_list
from ..errors import APIError
from ..pipeline import RequestPipeline
from ..schemas import ChatRequest
from ..slot_tasks import task_params
from ..threads import in_thread
from ..token_text import token_text
from .schemas import DetokenizeRequest, MixedPrompt, NativeCompletionRequest, TokenizeRequest


def piece_json(piece: bytes) -> str | list[int]:
    """A token's piece as /tokenize's with_pieces gives it: its text, or its bytes when not valid UTF-8 alone."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def tokenize_mixed(tokenizer: Tokenizer, prompt: MixedPrompt, add_special: bool, parse_special: bool,
                   max_tokens: int | None = None) -> list[int]:
    """llama-server's tokenize_mixed: a text, or a list of texts and token ids in order; add_special applies to a
    text that comes first. max_tokens bounds each text's tokenizing as in Tokenizer.encode."""
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special=add_special, parse_special=parse_special, max_tokens=max_tokens)
    ids: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, str):
            ids += tokenizer.encode(part, add_special=add_special and i == 0, parse_special=parse_special,
                                    max_tokens=max_tokens)
        else:
            ids.append(part)
    return ids


def create_native_router(path: RequestPipeline, sleeping: Callable[[], bool]) -> APIRouter:
    """The native routes (module docstring) on `path`'s slots; sleeping: whether the model is unloaded now
    (../sleep.py), /props' is_sleeping."""
    router = APIRouter()
    pool, config, tasks, first = path.pool, path.config, path.tasks, path.first
    tokenizer = first.tokenizer

    @router.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body: TokenizeRequest = await path.read_body(request, TokenizeRequest)
        if body.content is None:
            return {"tokens": []}
        ids = await in_thread(tokenize_mixed, tokenizer, body.content, body.add_special, body.parse_special)
        if not body.with_pieces:
            return {"tokens": ids}
        return {"tokens": [{"id": t, "piece": piece_json(tokenizer.token_to_piece(t))} for t in ids]}

    @router.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        body: DetokenizeRequest = await path.read_body(request, DetokenizeRequest)
        try:
            return {"content": token_text(tokenizer, body.tokens)}
        except ValueError as e:
            raise APIError(400, f"tokens: {e}") from None

    @router.post("/apply-template")
    async def apply_template(request: Request) -> dict[str, Any]:
        body: ChatRequest = await path.read_body(request, ChatRequest)
        prompt = await in_thread(path.chat_prompt, body)
        return {"prompt": prompt.replace(MARK, "")}  # the guard's marks are no text of the prompt

    @router.get("/props")
    async def props() -> dict[str, Any]:
        s = config.sampling
        defaults = dict(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
                        seed=config.default_seed, stop=None, spec_n_max=None)
        special = tokenizer.special_ids
        return {
            "default_generation_settings": {"n_ctx": first.n_ctx,
                                            "params": task_params(defaults, s.n_predict, False, first.spec)},
            "total_slots": pool.size, "model_alias": config.model_name, "model_path": first.path,
            "modalities": {"vision": False, "audio": False},
            "endpoint_slots": config.slots_endpoint, "endpoint_props": config.props_endpoint,
            "endpoint_metrics": config.metrics, "webui": False,
            "chat_template": config.chat_template.source if config.chat_template is not None else "",
            **{f"{name}_token": token_text(tokenizer, [special[name]]) if name in special else ""
               for name in ("bos", "eos")},
            "build_info": BUILD_INFO, "is_sleeping": sleeping(),
            # this runtime's: the sparse indexer's effective top-k and the --override-kv entries applied
            "indexer_top_k": first.indexer_top_k,
            "kv_overrides": [f"{key}={kind}:{value}" for key, kind, value in first.kv_overrides],
        }

    @router.post("/props")
    async def change_props(request: Request) -> dict[str, Any]:
        if not config.props_endpoint:
            raise APIError(501, "This server does not support changing global properties. Start it with `--props`")
        try:
            json.loads(await request.body())
        except ValueError as e:
            raise APIError(400, f"the body is not JSON: {e}") from None
        return {"success": True}  # llama-server has no property to change either

    @router.get("/slots")
    async def slots(request: Request) -> list[dict[str, Any]]:
        if not config.slots_endpoint:
            raise APIError(501, "This server does not support slots endpoint. Start it with `--slots`")
        if request.query_params.get("fail_on_no_slot") and pool.idle == 0:
            raise APIError(503, "no slot available")
        return tasks.describe()

    @router.post("/completion")
    @router.post("/completions")
    async def completion(request: Request) -> Response:
        body: NativeCompletionRequest = await path.read_body(request, NativeCompletionRequest)
        try:
            prompts = body.prompts()
        except ValueError as e:
            raise APIError(400, str(e)) from None
        ids = [await in_thread(prompt_ids, prompt) for prompt in prompts]
        texts = [await in_thread(token_text, tokenizer, i) for i in ids]
        return await path.generate_all(request, body, ids, lambda i: path.native_reply(
            body, texts[i], body.return_tokens, body.timings_per_token), "completion", native_list)

    def prompt_ids(prompt: MixedPrompt) -> list[int]:
        # llama-server's completion prompt: add_special, control tokens parsed (the client's own markup)
        if isinstance(prompt, str):
            return path.tokenize_prompt(prompt)
        return tokenize_mixed(tokenizer, prompt, True, True, max_tokens=first.n_ctx)

    return router
