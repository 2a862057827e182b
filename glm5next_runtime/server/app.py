"""The HTTP app of glm5next-server (FastAPI): the middlewares, the server-wide routes (/health, /metrics) and every
API surface's routes mounted on one request pipeline (pipeline.py: parse -> template -> schedule -> generate ->
reply). The slots are sequences of one engine: the generations of the requests that hold them run together,
batched step by step, on the scheduler's thread (../scheduler.py).

    openai_chat/       /v1/chat/completions, /v1/completions, /v1/models
    native/            llama-server's own: /completion, /tokenize, /detokenize, /apply-template, /props, /slots,
                       slot actions
    anthropic/         /v1/messages (errors in Anthropic's shape)
    openai_responses/  /v1/responses
    vertex/            Google Vertex AI's prediction routes (AIP_MODE=PREDICTION)
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from ..scheduler import Scheduler
from .anthropic import create_anthropic_router
from .auth import APIKeyMiddleware
from .body_limit import BodyLimitMiddleware
from .config import ServerConfig
from .cors import CORSMiddleware
from .errors import APIError, install_error_handlers
from .metrics import ServerMetrics
from .native import create_native_router, create_slot_router
from .openai_chat import create_openai_router
from .openai_responses import create_responses_router
from .pipeline import RequestPipeline
from .sleep import IdleSleep, SleepMiddleware
from .slot_tasks import SlotTasks
from .slots import SlotPool
from .stopping import Stopping
from .vertex import add_vertex_routes


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
    path = RequestPipeline(pool, config, scheduler, tasks, metrics, stopping)
    started = int(time.time())
    app.include_router(_service_router(pool, config, metrics, started))
    app.include_router(create_openai_router(path, started))
    app.include_router(create_slot_router(pool, config.slot_save_dir))
    app.include_router(create_native_router(path, lambda: sleep is not None and sleep.sleeping))
    app.include_router(create_anthropic_router(path))
    app.include_router(create_responses_router(path))
    if config.vertex is not None:  # last: its aliases are the routes above
        add_vertex_routes(app, config.vertex)
    return app


def _service_router(pool: SlotPool, config: ServerConfig, metrics: ServerMetrics, started: int) -> APIRouter:
    """/health and /metrics (with --metrics), llama-server's; started: the server's start in Unix seconds."""
    router = APIRouter()

    @router.get("/health")
    @router.get("/v1/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "slots_idle": pool.idle, "slots_processing": pool.size - pool.idle}

    @router.get("/metrics")
    async def prometheus() -> Response:
        if not config.metrics:
            raise APIError(501, "This server does not support metrics endpoint. Start it with `--metrics`")
        response = Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
        # llama-server's header, spelled as it spells it (Starlette would lower-case a name given to Response)
        response.raw_headers.append((b"Process-Start-Time-Unix", str(started).encode()))
        return response

    return router
