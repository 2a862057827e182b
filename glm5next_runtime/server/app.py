"""The OpenAI-compatible HTTP API of glm5next-server (FastAPI): routes and the path of one request through a slot
(the prompt passes ../prompt.py's checks before it waits for one).

Generation runs in worker threads (the C++ work releases the GIL), so the event loop keeps serving /health,
/metrics and the queue while the slots work. A stream pulls one text piece per thread hop; when its client goes
away Starlette cancels the stream between pieces, and the slot is free again.
"""
from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from ..chat import ChatTemplate, ChatTemplateError, opens_think_block
from ..generate import GenerationStream
from ..prompt import PromptError, check_prompt
from .auth import APIKeyMiddleware
from .errors import APIError, install_error_handlers, invalid_body, prompt_error
from .metrics import ServerMetrics
from .responses import DONE, ChatReply, CompletionReply, Reply, sse
from .schemas import ChatRequest, CompletionRequest, GenerationRequest
from .slots import SlotPool

log = logging.getLogger("glm5next.server")
Body = TypeVar("Body", bound=GenerationRequest)


@dataclass
class ServerConfig:
    """What the routes need besides the slots.

    model_name: the id /v1/models lists (--alias, else the file name).
    model_names: the names a request's `model` may carry (None or one of these; anything else is a 404).
    chat_template: None when chat is off (no template in the file, or --no-jinja).
    default_seed: the seed of requests that bring none (None: a random one each time).
    api_key: None: no authentication.
    """
    model_name: str
    model_names: frozenset[str] = field(default_factory=frozenset)
    chat_template: ChatTemplate | None = None
    default_seed: int | None = None
    api_key: str | None = None


class EventStream(StreamingResponse):
    """text/event-stream that gives its slot back once the response is over, however it ends (done, client
    gone, error), and only then: the worker thread of a cancelled stream finishes its piece first (anyio's
    to_thread is not abandoned on cancel), so the model is idle when `release` runs."""

    def __init__(self, events: AsyncIterator[str], release: Callable[[], None]):
        super().__init__(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._events = events
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._events.aclose()  # never started (client gone before the headers) or cut off
            self._release()


def create_app(pool: SlotPool, config: ServerConfig) -> FastAPI:
    """The FastAPI app serving `pool` (see the module docstring)."""
    app = FastAPI(title="glm5next-server", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    if config.api_key:
        app.add_middleware(APIKeyMiddleware, api_key=config.api_key)
    metrics = ServerMetrics(pool)
    first = pool.models[0]  # tokenizer and settings are the same in every slot
    started = int(time.time())
    router = APIRouter()

    @router.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "slots_idle": pool.idle, "slots_processing": pool.size - pool.idle}

    @router.get("/v1/models")
    @router.get("/models")
    async def models() -> dict[str, Any]:
        meta = {"n_ctx": first.n_ctx, "n_vocab": first.n_vocab, "spec_type": first.spec_type, "slots": pool.size}
        return {"object": "list", "data": [{"id": config.model_name, "object": "model", "created": started,
                                            "owned_by": "glm5next", "meta": meta}]}

    @router.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @router.post("/v1/completions")
    @router.post("/completions")
    async def completions(request: Request) -> Response:
        body = await read_body(request, CompletionRequest)
        check_model_name(body.model)
        ids = await tokenize(body.prompt) if isinstance(body.prompt, str) else list(body.prompt)
        return await generate(body, ids, CompletionReply(config.model_name), "completions")

    @router.post("/v1/chat/completions")
    @router.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await read_body(request, ChatRequest)
        check_model_name(body.model)
        if config.chat_template is None:
            raise APIError(501, "chat is off: the model file has no chat template, or the server runs with "
                                "--no-jinja; use /v1/completions")
        try:
            prompt = config.chat_template.render([m.for_template() for m in body.messages],
                                                 body.chat_template_kwargs)
        except ChatTemplateError as e:
            raise APIError(400, str(e)) from None
        reply = ChatReply(config.model_name, reasoning=opens_think_block(prompt))
        return await generate(body, await tokenize(prompt), reply, "chat_completions")

    async def read_body(request: Request, cls: type[Body]) -> Body:
        # JSON whatever the Content-Type says (llama-server too: curl -d sends form-urlencoded)
        try:
            return cls.model_validate_json(await request.body())
        except ValidationError as e:
            raise invalid_body(e) from None

    def check_model_name(name: str | None) -> None:
        if name is not None and name not in config.model_names:
            raise APIError(404, f"model {name!r} not found: this server serves {config.model_name!r}")

    async def tokenize(text: str) -> list[int]:
        # add_special and control tokens parsed: what Model.generate does with a text prompt
        return await anyio.to_thread.run_sync(partial(first.tokenize, text, add_special=True))

    def generate_kwargs(body: GenerationRequest) -> dict[str, Any]:
        limit = body.token_limit()
        seed = body.seed if body.seed is not None and body.seed >= 0 else config.default_seed
        # a server without speculation ignores the override (llama-server: no draft model, no drafting)
        n_max = body.spec_n_max() if first.spec_type == "draft-mtp" else None
        return dict(max_tokens=first.n_ctx if limit is None else limit, temperature=body.temperature,
                    top_k=body.top_k, top_p=body.top_p, min_p=body.min_p, seed=seed, stop=body.stop,
                    spec_n_max=n_max)

    async def generate(body: GenerationRequest, ids: list[int], reply: Reply, endpoint: str) -> Response:
        try:
            check_prompt(ids, first.n_ctx, first.n_vocab, room=1)  # room for a token: llama-server's rule
        except PromptError as e:
            raise prompt_error(e) from None
        kwargs = generate_kwargs(body)
        model = await pool.acquire()
        try:
            # generate() only checks its arguments (a ValueError is the request's fault) and builds the stream:
            # the work runs as the stream is iterated, in worker threads
            stream = model.generate(ids, stream=True, **kwargs)
        except BaseException as e:
            pool.release(model)
            if isinstance(e, ValueError):
                raise APIError(400, str(e)) from None
            raise
        if body.stream:
            return EventStream(stream_events(stream, reply, endpoint), partial(pool.release, model))
        try:
            result = await anyio.to_thread.run_sync(stream.finish)
        finally:
            pool.release(model)
        metrics.observe(endpoint, result.metrics)
        return JSONResponse(reply.whole(result))

    async def stream_events(stream: GenerationStream, reply: Reply, endpoint: str) -> AsyncIterator[str]:
        for chunk in reply.start():
            yield sse(chunk)
        try:
            while (piece := await anyio.to_thread.run_sync(next, stream, None)) is not None:
                for chunk in reply.piece(piece):
                    yield sse(chunk)
        except Exception as e:  # the headers are out: the error can only be an event
            log.exception("generation failed mid-stream")
            yield sse(APIError(500, f"generation failed: {type(e).__name__}: {e}").body())
            return
        assert stream.result is not None
        metrics.observe(endpoint, stream.result.metrics)
        for chunk in reply.end(stream.result):
            yield sse(chunk)
        yield DONE

    app.include_router(router)
    return app
