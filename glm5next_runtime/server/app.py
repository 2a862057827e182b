"""The OpenAI-compatible HTTP API of glm5next-server (FastAPI): routes and the path of one request through a slot
(the prompt passes ../prompt.py's checks before it waits for one).

The event loop only moves bytes: parsing a body, rendering the chat template (in a worker process, templates.py),
tokenizing (the Rust tokenizer releases the GIL) and generating (the C++ work releases it too) run in worker
threads, so /health, /metrics and the queue are served while a big request is processed. A text too long for the
context whatever its tokens is refused before it is tokenized (check_prompt_text), and tokenizing stops, piece by
piece, once the prompt is past the context (the error's n_prompt_tokens is then a lower bound). A stream pulls one
text piece per thread hop; when its client goes away Starlette cancels the stream between pieces, and the slot is
free again.

Text from the request never becomes control tokens in a chat prompt (../user_text.py); a raw /v1/completions
prompt is the client's whole prompt and keeps llama-server's meaning (control tokens parsed).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from ..chat import ChatTemplateError, opens_think_block
from ..generate import GenerationResult, GenerationStream
from ..prompt import PromptError, PromptTooLongError, check_prompt, check_prompt_text
from ..user_text import ControlTokenGuard
from .auth import APIKeyMiddleware
from .body_limit import DEFAULT_MAX_BODY_MIB, BodyLimitMiddleware
from .errors import INTERNAL, APIError, install_error_handlers, invalid_body, prompt_error
from .metrics import ServerMetrics
from .responses import DONE, ChatReply, CompletionReply, Reply, sse
from .schemas import ChatRequest, CompletionRequest, GenerationRequest
from .slots import SlotPool, SlotsClosed
from .stopping import GRACE_S, ShuttingDown, Stopping
from .templates import RenderedTooLong, TemplateWorkers

log = logging.getLogger("glm5next.server")
Body = TypeVar("Body", bound=GenerationRequest)
T = TypeVar("T")


@dataclass
class ServerConfig:
    """What the routes need besides the slots.

    model_name: the id /v1/models lists (--alias, else the file name).
    model_names: the names a request's `model` may carry (None or one of these; anything else is a 404).
    chat_template: None when chat is off (no template in the file, or --no-jinja).
    default_seed: the seed of requests that bring none (None: a random one each time).
    api_key: None: no authentication.
    max_body_bytes: larger request bodies get a 413 (--max-body-mib).
    grace_s: how long running generations may go on once the server is stopping (stopping.py).
    """
    model_name: str
    model_names: frozenset[str] = field(default_factory=frozenset)
    chat_template: TemplateWorkers | None = None
    default_seed: int | None = None
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_MIB << 20
    grace_s: float = GRACE_S


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
    stopping = Stopping(pool, config.grace_s)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stopping.watch_signals()
        yield
        stopping.begin()

    app = FastAPI(title="glm5next-server", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, limit=config.max_body_bytes)
    if config.api_key:  # added last, so it runs first: a request without the key learns nothing
        app.add_middleware(APIKeyMiddleware, api_key=config.api_key)
    metrics = ServerMetrics(pool)
    first = pool.models[0]  # tokenizer and settings are the same in every slot
    guard = ControlTokenGuard(first.tokenizer)
    token_bytes = first.tokenizer.max_token_bytes
    # tokenizing stops past this (check_prompt refuses the prompt then: its n_prompt_tokens is a lower bound)
    max_prompt_tokens = first.n_ctx - 1
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
        if isinstance(body.prompt, str):
            ids = await in_thread(tokenize_completion, body.prompt)
        else:
            ids = list(body.prompt)
        return await generate(body, ids, CompletionReply(config.model_name), "completions")

    @router.post("/v1/chat/completions")
    @router.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await read_body(request, ChatRequest)
        check_model_name(body.model)
        if config.chat_template is None:
            raise APIError(501, "chat is off: the model file has no chat template, or the server runs with "
                                "--no-jinja; use /v1/completions")
        prompt, ids = await in_thread(render_chat, config.chat_template, body)
        reply = ChatReply(config.model_name, reasoning=opens_think_block(prompt))
        return await generate(body, ids, reply, "chat_completions")

    async def read_body(request: Request, cls: type[Body]) -> Body:
        # JSON whatever the Content-Type says (llama-server too: curl -d sends form-urlencoded); the body arrives
        # through BodyLimitMiddleware, which stops it at the limit
        raw = await request.body()
        try:
            return await in_thread(cls.model_validate_json, raw)
        except ValidationError as e:
            raise invalid_body(e) from None

    def check_model_name(name: str | None) -> None:
        if name is not None and name not in config.model_names:
            raise APIError(404, f"model {name!r} not found: this server serves {config.model_name!r}")

    def tokenize_completion(text: str) -> list[int]:
        # a raw prompt as Model.generate takes it: add_special, control tokens parsed (the client's own markup)
        check_text(text)
        return first.tokenizer.encode(text, add_special=True, max_tokens=max_prompt_tokens)

    def render_chat(template: TemplateWorkers, body: ChatRequest) -> tuple[str, list[int]]:
        # every string of the request is marked before the template sees it; only the template's markup becomes
        # control tokens
        messages = guard.neutralize([m.for_template() for m in body.messages])
        variables = guard.neutralize(body.chat_template_kwargs or {})
        try:
            prompt = template.render(messages, variables)
        except RenderedTooLong as e:  # n_chars characters are at least that many bytes
            raise prompt_error(PromptTooLongError(-(-e.n_chars // token_bytes), first.n_ctx, 1, at_least=True))
        except ChatTemplateError as e:
            raise APIError(400, str(e)) from None
        check_text(prompt)
        return prompt, guard.encode(prompt, add_special=True, max_tokens=max_prompt_tokens)

    def check_text(text: str) -> None:
        try:
            check_prompt_text(text, first.n_ctx, token_bytes, room=1)
        except PromptError as e:
            raise prompt_error(e) from None

    def generate_kwargs(body: GenerationRequest) -> dict[str, Any]:
        limit = body.token_limit()
        seed = body.seed if body.seed is not None and body.seed >= 0 else config.default_seed
        # a server without speculation ignores the override (llama-server: no draft model, no drafting)
        n_max = body.spec_n_max() if first.spec_type == "draft-mtp" else None
        return dict(max_tokens=first.n_ctx if limit is None else limit, temperature=body.temperature,
                    top_k=body.top_k, top_p=body.top_p, min_p=body.min_p, seed=seed, stop=body.stop,
                    spec_n_max=n_max, cache_prompt=body.cache_prompt)

    async def generate(body: GenerationRequest, ids: list[int], reply: Reply, endpoint: str) -> Response:
        try:
            check_prompt(ids, first.n_ctx, first.n_vocab, room=1)  # room for a token: llama-server's rule
        except PromptError as e:
            raise prompt_error(e) from None
        kwargs = generate_kwargs(body)
        try:
            model = await pool.acquire(ids)
        except SlotsClosed:
            raise ShuttingDown() from None
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
            result = await in_thread(finish_unless_cut, stream, stopping.cut)
        finally:
            pool.release(model)
        if result is None:
            raise ShuttingDown(": the generation was stopped")
        metrics.observe(endpoint, result.metrics)
        return JSONResponse(reply.whole(result))

    async def stream_events(stream: GenerationStream, reply: Reply, endpoint: str) -> AsyncIterator[str]:
        for chunk in reply.start():
            yield sse(chunk)
        try:
            while (piece := await anyio.to_thread.run_sync(next, stream, None)) is not None:
                if stopping.cut.is_set():  # the headers are out: the error can only be an event
                    yield sse(ShuttingDown(": the generation was stopped").body())
                    return
                for chunk in reply.piece(piece):
                    yield sse(chunk)
        except Exception:
            log.exception("generation failed mid-stream")
            yield sse(APIError(500, INTERNAL).body())
            return
        assert stream.result is not None
        metrics.observe(endpoint, stream.result.metrics)
        for chunk in reply.end(stream.result):
            yield sse(chunk)
        yield DONE

    app.include_router(router)
    return app


async def in_thread(func: Callable[..., T], *args: Any) -> T:
    """func(*args) in a worker thread: the event loop stays free."""
    return await anyio.to_thread.run_sync(partial(func, *args))


def finish_unless_cut(stream: GenerationStream, cut: threading.Event) -> GenerationResult | None:
    """Run the generation to its end and return its result, or None when `cut` is set first (checked between text
    pieces)."""
    for _ in stream:
        if cut.is_set():
            return None
    return stream.result
