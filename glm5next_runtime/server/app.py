"""The OpenAI-compatible HTTP API of glm5next-server (FastAPI): routes and the path of one request through a slot
(the prompt passes ../prompt.py's checks before it waits for one). The slots are sequences of one engine: the
generations of the requests that hold them run together, batched step by step, on the scheduler's thread
(../scheduler.py); a request reads its generation's text pieces as they come.

The event loop only moves bytes: parsing a body, rendering the chat template (in a worker process, templates.py),
tokenizing (the Rust tokenizer releases the GIL) and generating (the C++ work releases it too) run in worker
threads, so /health, /metrics and the queue are served while a big request is processed. A text too long for the
context whatever its tokens is refused before it is tokenized (check_prompt_text), and tokenizing stops, piece by
piece, once the prompt is past the context (the error's n_prompt_tokens is then a lower bound). A stream pulls one
text piece per thread hop; when its client goes away Starlette cancels the stream between pieces, and the slot is
free again. A request whose client goes away while it waits for a slot, or while a plain (not streamed) response
is generated, is dropped too (disconnect.py): out of the queue at once, or at the next text piece. Both count in
the metrics' cancelled requests.

Text from the request never becomes control tokens in a chat prompt (../user_text.py); a raw /v1/completions
prompt is the client's whole prompt and keeps llama-server's meaning (control tokens parsed).
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.types import Receive, Scope, Send

from ..chat import ChatTemplateError, opens_think_block
from ..generate import GenerationResult, GenerationStream, PromptProgress
from ..model import Model
from ..prompt import PromptError, PromptTooLongError, check_prompt, check_prompt_text
from ..scheduler import ScheduledGeneration, Scheduler
from ..tool_calls import argument_schemas
from ..user_text import ControlTokenGuard
from .anthropic import create_anthropic_router
from .auth import APIKeyMiddleware
from .body_limit import BodyLimitMiddleware
from .choices import choice_bodies, merge_choices
from .config import ServerConfig
from .cors import CORSMiddleware
from .disconnect import ClientGone, DisconnectWatch
from .errors import INTERNAL, APIError, install_error_handlers, invalid_body, prompt_error
from .logprobs import TokenPieces
from .metrics import ServerMetrics
from .native import RequestPath, create_native_router, token_text
from .native_replies import NativeCompletionReply
from .openai_responses import create_responses_router
from .prefill import split_prefill
from .responses import ChatReply, CompletionReply, Reply
from .schemas import ChatRequest, CompletionRequest, GenerationRequest
from .slot_files import create_slot_router
from .slot_tasks import SlotTask, SlotTasks, prompt_cache_line, task_params
from .sleep import IdleSleep, SleepMiddleware
from .slots import SlotPool, SlotsClosed
from .stopping import ShuttingDown, Stopping
from .structured import structured_kwargs
from .templates import RenderedTooLong
from .tool_prompt import renders_tools, tool_messages
from .tool_replies import ToolCalls
from .vertex import add_vertex_routes

log = logging.getLogger("glm5next.server")
Body = TypeVar("Body", bound=BaseModel)
T = TypeVar("T")


class EventStream(StreamingResponse):
    """text/event-stream that gives its slot back once the response is over, however it ends (done, client
    gone, error), and only then: `release` (a coroutine) drops the generation and waits until the scheduler is done
    with the slot's sequence."""

    def __init__(self, events: AsyncIterator[str], release: Callable[[], Awaitable[None]]):
        super().__init__(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._events = events
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._events.aclose()  # never started (client gone before the headers) or cut off
            await self._release()


def create_app(pool: SlotPool, config: ServerConfig) -> FastAPI:
    """The FastAPI app serving `pool` (slots on one engine: see the module docstring)."""
    stopping = Stopping(pool, config.grace_s)
    scheduler = Scheduler(config.step_tokens or pool.models[0].n_batch).start()

    sleep = IdleSleep(pool.models, config.sleep_idle_s) if config.sleep_idle_s else None

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stopping.watch_signals()
        watcher = asyncio.create_task(sleep.run()) if sleep is not None else None
        yield
        if watcher is not None:
            watcher.cancel()
        stopping.begin()
        scheduler.close()

    app = FastAPI(title="glm5next-server", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    install_error_handlers(app)
    if sleep is not None:  # added first, so it runs last: what is turned away before a route does not wake it
        app.add_middleware(SleepMiddleware, sleep=sleep)
    app.add_middleware(BodyLimitMiddleware, limit=config.max_body_bytes)
    if config.api_key:  # added late, so it runs early: a request without the key learns nothing
        app.add_middleware(APIKeyMiddleware, api_key=config.api_key)
    app.add_middleware(CORSMiddleware, policy=config.cors)  # last, so first: preflights carry no key
    metrics = ServerMetrics(pool)
    tasks = SlotTasks(pool)
    first = pool.models[0]  # tokenizer and settings are the same in every slot
    guard = ControlTokenGuard(first.tokenizer)
    token_bytes = first.tokenizer.max_token_bytes
    pieces = TokenPieces(first.tokenizer, config.special)  # tokens as logprobs show them
    # tokenizing stops past this (check_prompt refuses the prompt then: its n_prompt_tokens is a lower bound)
    max_prompt_tokens = first.n_ctx - 1
    started = int(time.time())
    router = APIRouter()

    @router.get("/health")
    @router.get("/v1/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "slots_idle": pool.idle, "slots_processing": pool.size - pool.idle}

    @router.get("/v1/models")
    @router.get("/models")
    async def models() -> dict[str, Any]:
        meta = {"n_ctx": first.n_ctx, "n_vocab": first.n_vocab, "spec_type": first.spec_type, "slots": pool.size}
        return {"object": "list", "data": [{"id": config.model_name, "aliases": list(config.aliases),
                                            "tags": list(config.tags), "object": "model", "created": started,
                                            "owned_by": "glm5next", "meta": meta}]}

    @router.get("/metrics")
    async def prometheus() -> Response:
        if not config.metrics:
            raise APIError(501, "This server does not support metrics endpoint. Start it with `--metrics`")
        response = Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
        # llama-server's header, spelled as it spells it (Starlette would lower-case a name given to Response)
        response.raw_headers.append((b"Process-Start-Time-Unix", str(started).encode()))
        return response

    @router.post("/v1/completions")  # /completions (no /v1) is llama-server's native completion: native.py
    async def completions(request: Request) -> Response:
        body = await read_body(request, CompletionRequest)
        prompts = [await in_thread(tokenize_completion, p) if isinstance(p, str) else list(p) for p in body.prompts()]
        return await generate_all(request, body, prompts, lambda _i: CompletionReply(
            body.model or config.model_name, pieces, body.include_usage()), "completions",
            partial(merge_choices, per_prompt=body.choices()))

    @router.post("/v1/chat/completions")
    @router.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await read_body(request, ChatRequest)
        prompt, ids = await in_thread(render_chat, body)
        if (field := body.grammar_field()) and opens_think_block(prompt):
            raise APIError(400, f"{field}: the prompt opens a think block, which the grammar would not let the model "
                           "close; leave chat_template_kwargs.enable_thinking out (a grammar turns thinking off)")
        tools = body.active_tools()
        return await generate_all(request, body, [ids], lambda _i: ChatReply(
            body.model or config.model_name, pieces, body.splits_reasoning() and opens_think_block(prompt),
            body.include_usage(), ToolCalls(argument_schemas(tools), body.parallel_tool_calls) if tools else None),
            "chat_completions", partial(merge_choices, per_prompt=body.choices()))

    @router.post("/v1/chat/completions/input_tokens")
    @router.post("/chat/completions/input_tokens")
    async def chat_input_tokens(request: Request) -> dict[str, int]:
        # llama-server's: the prompt /v1/chat/completions would generate from, in tokens
        _prompt, ids = await in_thread(render_chat, await read_body(request, ChatRequest))
        return {"input_tokens": len(ids)}

    async def read_body(request: Request, cls: type[Body]) -> Body:
        # JSON whatever the Content-Type says (llama-server too: curl -d sends form-urlencoded); the body arrives
        # through BodyLimitMiddleware, which stops it at the limit
        raw = await request.body()
        try:
            body = await in_thread(cls.model_validate_json, raw)
        except ValidationError as e:
            raise invalid_body(e) from None
        return config.sampling.apply(body) if isinstance(body, GenerationRequest) else body

    def tokenize_completion(text: str) -> list[int]:
        # a raw prompt as Model.generate takes it: add_special, control tokens parsed (the client's own markup)
        check_text(text)
        return first.tokenizer.encode(text, add_special=True, max_tokens=max_prompt_tokens)

    def chat_prompt(body: ChatRequest) -> str:
        # every string of the request is marked before the template sees it; only the template's markup becomes
        # control tokens. A final assistant message is continued (prefill.py).
        if config.chat_template is None:
            raise APIError(501, "chat is off: this server was given no chat template; use /v1/completions")
        messages, variables = [m.for_template() for m in body.messages], body.template_variables()
        if tools := body.active_tools():
            messages, tool_variables = tool_messages(messages, tools, renders_tools(config.chat_template.source))
            variables = tool_variables | variables
        messages, prefill = split_prefill(messages, body.continue_final_message, body.add_generation_prompt)
        variables = guard.neutralize(variables)
        try:
            prompt = config.chat_template.render(guard.neutralize(messages), variables,
                                                 body.add_generation_prompt or prefill is not None)
        except RenderedTooLong as e:  # n_chars characters are at least that many bytes
            raise prompt_error(PromptTooLongError(-(-e.n_chars // token_bytes), first.n_ctx, 1, at_least=True))
        except ChatTemplateError as e:
            raise APIError(400, str(e)) from None
        return prompt + guard.neutralize(prefill or "")

    def render_chat(body: ChatRequest) -> tuple[str, list[int]]:
        prompt = chat_prompt(body)
        check_text(prompt)
        return prompt, guard.encode(prompt, add_special=True, max_tokens=max_prompt_tokens)

    def native_reply(body: GenerationRequest, prompt_text: str, return_tokens: bool = False,
                     timings_per_token: bool = False) -> NativeCompletionReply:
        # the native /completion's reply to a generation of `body` from the prompt `prompt_text` (its ids as text,
        # detokenized off the event loop by the caller)
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        return NativeCompletionReply(body.model or config.model_name, prompt_text, first.n_ctx,
                                     stops, lambda t: token_text(first.tokenizer, t, config.special), return_tokens,
                                     timings_per_token, pieces)

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
                    spec_n_max=n_max, cache_prompt=body.cache_prompt, special=config.special,
                    logprobs=body.top_probs(), **structured_kwargs(body, first.tokenizer))

    async def generate_all(request: Request, body: GenerationRequest, prompts: list[list[int]],
                           make_reply: Callable[[int], Reply], endpoint: str,
                           combine: Callable[[list[dict[str, Any]]], Any]) -> Response:
        # body.choices() generations per prompt (choices.py), one after another; make_reply(prompt index) answers
        # one generation, combine their bodies when there are several. A failed one answers the request.
        runs = [(b, ids, i) for i, ids in enumerate(prompts) for b in choice_bodies(body, config.default_seed)]
        if len(runs) == 1:
            return await generate(request, body, prompts[0], make_reply(0), endpoint)
        if body.stream:
            raise APIError(400, "stream: several choices (n) or prompts in one request are not streamed yet; send "
                                "stream false, or one request per choice")
        bodies = []
        for run_body, ids, i in runs:
            response = await generate(request, run_body, ids, make_reply(i), endpoint)
            if response.status_code != 200:
                return response
            bodies.append(json.loads(response.body))
        return JSONResponse(combine(bodies))

    async def generate(request: Request, body: GenerationRequest, ids: list[int], reply: Reply,
                       endpoint: str) -> Response:
        # the client is watched from here until its response starts: gone while queued or generating, the request
        # is dropped (the slot freed) and counted as cancelled
        async with DisconnectWatch(request.receive) as watch:
            try:
                return await respond(body, ids, reply, endpoint, watch)
            except ClientGone:
                metrics.cancelled.inc()
                return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    async def respond(body: GenerationRequest, ids: list[int], reply: Reply, endpoint: str,
                      watch: DisconnectWatch) -> Response:
        try:
            check_prompt(ids, first.n_ctx, first.n_vocab, room=1)  # room for a token: llama-server's rule
        except PromptError as e:
            raise prompt_error(e) from None
        kwargs = await in_thread(generate_kwargs, body)  # a grammar compiles off the event loop
        wanted = None if body.id_slot == -1 else body.id_slot % pool.size  # llama-server's wrap-around
        try:
            model = await watch.unless_gone(pool.acquire(ids, slot=wanted))
        except SlotsClosed:
            raise ShuttingDown() from None
        try:
            if config.prompt_cache is not None:
                await in_thread(config.prompt_cache.prepare, model, ids, body.cache_prompt)
        except BaseException:
            pool.release(model)
            raise
        try:
            # generation() only checks its arguments (a ValueError is the request's fault): the work runs on the
            # scheduler's thread, with the other slots' generations
            handle = scheduler.submit(model.generation(ids, **kwargs), progress=body.stream and body.return_progress)
        except BaseException as e:
            pool.release(model)
            if isinstance(e, ValueError):
                raise APIError(400, str(e)) from None
            raise
        stream = handle.stream
        limit = body.token_limit()
        params = task_params(kwargs, -1 if limit is None else limit, body.stream, model.spec, body.ignore_eos)
        task = tasks.begin(pool.models.index(model), params, len(ids), stream)
        reply.bind(task)
        # llama-server's __verbose: an OpenAI-shaped body that is not streamed carries the native one
        verbose = native_reply(body, await in_thread(token_text, first.tokenizer, ids)) \
            if body.verbose and isinstance(reply, (ChatReply, CompletionReply)) else None
        if verbose is not None:
            verbose.bind(task)
        if body.stream:
            return EventStream(stream_events(stream, reply, endpoint, task), partial(release, handle, model))
        try:
            result = await in_thread(finish_unless, handle, (watch.gone, stopping.cut))
        finally:
            await release(handle, model)
        if result is None:
            if watch.gone.is_set():
                raise ClientGone()
            raise ShuttingDown(": the generation was stopped")
        observe(endpoint, task, result.metrics)
        out = reply.whole(result)
        if verbose is not None:
            out["__verbose"] = verbose.whole(result)
        return JSONResponse(out)

    async def release(handle: ScheduledGeneration, model: Model) -> None:
        # the slot goes back once the scheduler no longer touches its sequence (at once when the generation ended)
        handle.cancel()
        if not handle.done:
            await in_thread(handle.wait)
        pool.release(model)

    def observe(endpoint: str, task: SlotTask, result_metrics: dict[str, Any]) -> None:
        metrics.observe(endpoint, result_metrics)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s", prompt_cache_line(task, result_metrics))

    async def stream_events(stream: GenerationStream, reply: Reply, endpoint: str,
                            task: SlotTask) -> AsyncIterator[str]:
        try:
            for chunk in reply.start():
                yield reply.event(chunk)
            try:
                while (piece := await anyio.to_thread.run_sync(next, stream, None)) is not None:
                    if stopping.cut.is_set():  # the headers are out: the error can only be an event
                        yield reply.error_event(ShuttingDown(": the generation was stopped"))
                        return
                    for chunk in reply.progress(piece) if isinstance(piece, PromptProgress) else reply.piece(piece):
                        yield reply.event(chunk)
            except Exception:
                log.exception("generation failed mid-stream")
                yield reply.error_event(APIError(500, INTERNAL))
                return
            assert stream.result is not None
            observe(endpoint, task, stream.result.metrics)
            for chunk in reply.end(stream.result):
                yield reply.event(chunk)
            if reply.stream_end is not None:
                yield reply.stream_end
        except (asyncio.CancelledError, GeneratorExit):  # the client went away: Starlette cut the stream
            metrics.cancelled.inc()
            raise

    app.include_router(router)
    app.include_router(create_slot_router(pool, config.slot_save_dir))
    path = RequestPath(read_body, tokenize_completion, chat_prompt, generate, render_chat, generate_all, native_reply)
    app.include_router(create_native_router(pool, config, tasks, path,
                                            lambda: sleep is not None and sleep.sleeping))
    app.include_router(create_anthropic_router(config, path, first.tokenizer))
    app.include_router(create_responses_router(config, path))
    if config.vertex is not None:  # last: its aliases are the routes above
        add_vertex_routes(app, config.vertex)
    return app


async def in_thread(func: Callable[..., T], *args: Any) -> T:
    """func(*args) in a worker thread: the event loop stays free."""
    return await anyio.to_thread.run_sync(partial(func, *args))


STOP_POLL_S = 0.05  # how often a generation answered whole looks at its client and the server's stopping


def finish_unless(handle: ScheduledGeneration, stops: Sequence[threading.Event]) -> GenerationResult | None:
    """Wait for the generation's end and return its result, or None when one of `stops` is set first (looked at
    every STOP_POLL_S). It waits on the generation's end, not piece by piece: a waiter woken at every token would take
    the CPU from the scheduler's threads that many times a step (on 2 cores, a ggml thread preempted leaves the other
    spinning at the graph's barriers)."""
    while not handle.wait(STOP_POLL_S):
        if any(stop.is_set() for stop in stops):
            return None
    return handle.stream.finish()
