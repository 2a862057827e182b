"""llama-server's native endpoints, in its own shapes (not OpenAI's):

    POST /tokenize, /detokenize      the model's tokenizer (llama-server's token pieces)
    POST /apply-template             the prompt the chat endpoint would generate from (same template and guard)
    GET  /props, POST /props         server properties; POST only with --props, and it changes nothing
    GET  /slots                      every slot's state and last task (501 with --no-slots)
    POST /completion, /completions   the native completion (OpenAI's is /v1/completions)

The completion runs through the same request path as the OpenAI endpoints (app.create_app: slots, prompt cache,
cancellation, metrics), with its own reply (native_replies.py). Tokenizing runs in worker threads.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from ..tokenizer import Tokenizer
from ..user_text import MARK
from .build_info import BUILD_INFO
from .chat_bridge import as_chat
from .choices import native_list
from .config import ServerConfig
from .errors import APIError
from .native_replies import NativeCompletionReply
from .native_schemas import DetokenizeRequest, MixedPrompt, NativeCompletionRequest, TokenizeRequest
from .request_defaults import RequestDefaults
from .responses import Reply
from .schemas import ChatRequest, GenerationRequest
from .slot_tasks import SlotTasks, task_params
from .slots import SlotPool



class RequestPath(NamedTuple):
    """What the native routes (and anthropic.py's, openai_responses.py's) share with the OpenAI ones
    (app.create_app's closures)."""
    read_body: Callable[[Request, type[BaseModel]], Awaitable[Any]]
    tokenize_prompt: Callable[[str], list[int]]  # a raw text prompt, size-checked and bounded
    chat_prompt: Callable[[ChatRequest], str]  # the chat template's prompt (raises APIError)
    generate: Callable[[Request, GenerationRequest, list[int], Reply, str], Awaitable[Response]]
    render_chat: Callable[[ChatRequest], tuple[str, list[int]]]  # the chat prompt and its ids, size-checked
    # generate for each prompt its choices (choices.py): (request, body, prompts' ids, prompt index -> reply,
    # endpoint, the generations' bodies -> the response's)
    generate_all: Callable[[Request, GenerationRequest, list[list[int]], Callable[[int], Reply], str,
                            Callable[[list[dict[str, Any]]], Any]], Awaitable[Response]]
    # the native completion's reply: (body, prompt text, return_tokens, timings_per_token)
    native_reply: Callable[[GenerationRequest, str, bool, bool], NativeCompletionReply]

    async def bridged_chat(self, request: Request, cls: type[BaseModel],
                           sampling: RequestDefaults) -> tuple[Any, ChatRequest, str, list[int]]:
        """A body of another API (`cls`, which has chat_fields()) read, the chat request it is (chat_bridge.as_chat)
        and that chat's prompt and ids: (body, chat, prompt, ids). Raises APIError (400) as those do."""
        body = await self.read_body(request, cls)
        chat = await in_thread(lambda: as_chat(body.chat_fields(), sampling))
        prompt, ids = await in_thread(self.render_chat, chat)
        return body, chat, prompt, ids


def token_text(tokenizer: Tokenizer, ids: Sequence[int], special: bool = True) -> str:
    """The text of `ids` as llama-server writes it (token pieces joined; control tokens as their text unless
    `special` is False). Raises ValueError naming an id outside the vocab."""
    return b"".join(tokenizer.token_to_piece(t, special) for t in ids).decode("utf-8", errors="replace")


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


def create_native_router(pool: SlotPool, config: ServerConfig, tasks: SlotTasks, path: RequestPath,
                         sleeping: Callable[[], bool]) -> APIRouter:
    """The native routes (module docstring) of the server of `pool`; sleeping: whether the model is unloaded now
    (sleep.py), /props' is_sleeping."""
    router = APIRouter()
    first = pool.models[0]
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


async def in_thread(func: Callable[..., Any], *args: Any) -> Any:
    """func(*args) in a worker thread: the event loop stays free (app.py's, which imports this module)."""
    return await anyio.to_thread.run_sync(partial(func, *args))
