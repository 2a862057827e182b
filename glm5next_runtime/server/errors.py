"""OpenAI-shaped errors, as llama-server writes them: {"error": {"code": STATUS, "message": ..., "type": ...}}.

Every failure a request can meet ends here: our own checks (APIError, pydantic's included via invalid_body, the
prompt checks via prompt_error), Starlette's (unknown route, wrong method), a client gone during its upload (one
log line) and anything unexpected (500 with a generic message: the details, traceback included, go to the log
only; the server keeps serving).
"""
from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from ..prompt import PromptError, PromptTooLongError

# llama-server's error types by status (tools/server/utils.hpp, format_error_response)
TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 500: "server_error", 501: "not_supported_error", 503: "unavailable_error"}
INTERNAL = "internal server error (the server log has the details)"
log = logging.getLogger("glm5next.server")


class APIError(Exception):
    """A request the server refuses. status: HTTP status; type: defaults to llama-server's type for the status;
    extra: more fields of the error object (e.g. n_prompt_tokens and n_ctx of exceed_context_size_error)."""

    def __init__(self, status: int, message: str, type: str | None = None, **extra: Any):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or TYPES.get(status, "invalid_request_error")
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.status, "message": self.message, "type": self.type, **self.extra}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def invalid_body(exc: ValidationError) -> APIError:
    """pydantic's errors about a request body (malformed JSON included) as one 400: "max_tokens: Input should be
    greater than or equal to 0; ..."."""
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else err["msg"])
    return APIError(400, "; ".join(parts))


def prompt_error(exc: PromptError) -> APIError:
    """A failed prompt check as llama-server answers it: a prompt too long for the context is a 400
    exceed_context_size_error carrying n_prompt_tokens and n_ctx, any other a 400 invalid_request_error with the
    check's message."""
    if isinstance(exc, PromptTooLongError):
        return APIError(400, "the request exceeds the available context size, try increasing it",
                        type="exceed_context_size_error", n_prompt_tokens=exc.n_prompt_tokens, n_ctx=exc.n_ctx)
    return APIError(400, str(exc))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of `app` in the OpenAI shape."""

    @app.exception_handler(APIError)
    async def api_error(_request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        return APIError(exc.status_code, str(exc.detail)).response()

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, _exc: ClientDisconnect) -> Response:
        log.info("%s %s: the client went away during its upload", request.method, request.url.path)
        return Response(status_code=400)  # nobody reads it

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, _exc: Exception) -> JSONResponse:
        # Starlette re-raises after this answer, so uvicorn logs the traceback; the client learns nothing of it
        return APIError(500, INTERNAL).response()
