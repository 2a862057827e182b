"""One request's way through the server, the same for every API surface (openai_chat/, native/, anthropic/,
openai_responses/ call it; none has a path of its own):

    parse     read_body: the body as the surface's schema (schemas.py), the server's defaults applied
    template  chat_prompt / render_chat: the chat template's prompt (templates.py, in a worker process) and its
              ids, or tokenize_prompt for a raw prompt; bridged_chat for a body of another API (chat_bridge.py)
    schedule  a slot (slots.py), the RAM prompt cache (prompt_cache.py), the generation handed to the scheduler
              (../scheduler.py), whose thread runs the slots' generations batched step by step
    reply     the surface's Reply (replies.py): one body, or its stream's events piece by piece

The prompt passes ../prompt.py's checks before it waits for a slot. The event loop only moves bytes: parsing a
body, rendering the chat template, tokenizing (the Rust tokenizer releases the GIL) and generating (the C++ work
releases it too) run in worker threads, so /health, /metrics and the queue are served while a big request is
processed. A text too long for the context whatever its tokens is refused before it is tokenized
(check_prompt_text), and tokenizing stops, piece by piece, once the prompt is past the context (the error's
n_prompt_tokens is then a lower bound). A stream pulls one text piece per thread hop; when its client goes away
Starlette cancels the stream between pieces, and the slot is free again. A request whose client goes away while it
waits for a slot, or while a plain (not streamed) response is generated, is dropped too (disconnect.py): out of
the queue at once, or at the next text piece. Both count in the metrics' cancelled requests.

Text from the request never becomes control tokens in a chat prompt (../user_text.py); a raw completion prompt is
the client's whole prompt and keeps llama-server's meaning (control tokens parsed).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from ..chat import ChatTemplateError
from ..generate import GenerationResult
from ..model import Model
from ..prompt import PromptError, PromptTooLongError, check_prompt, check_prompt_text
from ..scheduler import ScheduledGeneration, Scheduler
from ..user_text import ControlTokenGuard
from .chat_bridge import as_chat
from .choices import choice_bodies
from .completion_reply import NativeCompletionReply
from .config import ServerConfig
from .disconnect import ClientGone, DisconnectWatch
from .errors import APIError, invalid_body, prompt_error
from .event_stream import EventStream, finish_unless, reply_events
from .logprobs import TokenPieces
from .metrics import ServerMetrics
from .prefill import split_prefill
from .replies import Reply
from .schemas import ChatRequest, GenerationRequest
from .slot_tasks import SlotTask, SlotTasks, prompt_cache_line, task_params
from .slots import SlotPool, SlotsClosed
from .stopping import ShuttingDown, Stopping
from .structured import structured_kwargs
from .templates import RenderedTooLong
from .threads import in_thread
from .token_text import token_text
from .tool_prompt import renders_tools, tool_messages

log = logging.getLogger("glm5next.server")
Body = TypeVar("Body", bound=BaseModel)


class RequestPipeline:
    """The stages of the module docstring over `pool`'s slots, run by `scheduler`; `tasks` reports what the slots
    run (GET /slots), `metrics` counts the requests, `stopping` cuts generations when the server stops."""

    def __init__(self, pool: SlotPool, config: ServerConfig, scheduler: Scheduler, tasks: SlotTasks,
                 metrics: ServerMetrics, stopping: Stopping):
        self.pool, self.config, self.tasks = pool, config, tasks
        self._scheduler, self._metrics, self._stopping = scheduler, metrics, stopping
        self.first = pool.models[0]  # tokenizer and settings are the same in every slot
        self._guard = ControlTokenGuard(self.first.tokenizer)
        self._token_bytes = self.first.tokenizer.max_token_bytes
        self.pieces = TokenPieces(self.first.tokenizer, config.special)  # tokens as logprobs show them
        # tokenizing stops past this (check_prompt refuses the prompt then: its n_prompt_tokens is a lower bound)
        self._max_prompt_tokens = self.first.n_ctx - 1

    # ------------------------------------------------------------------------------------------------ parse

    async def read_body(self, request: Request, cls: type[Body]) -> Body:
        """The request's body as `cls` (GenerationRequests with the server's defaults applied). JSON whatever the
        Content-Type says (llama-server too: curl -d sends form-urlencoded); the body arrives through
        BodyLimitMiddleware, which stops it at the limit. Raises APIError (400) naming the invalid field."""
        raw = await request.body()
        try:
            body = await in_thread(cls.model_validate_json, raw)
        except ValidationError as e:
            raise invalid_body(e) from None
        return self.config.sampling.apply(body) if isinstance(body, GenerationRequest) else body

    # ------------------------------------------------------------------------------------------------ template

    def tokenize_prompt(self, text: str) -> list[int]:
        """A raw prompt's ids as Model.generate takes them: add_special, control tokens parsed (the client's own
        markup); size-checked and bounded (raises APIError as ../prompt.py's checks)."""
        self._check_text(text)
        return self.first.tokenizer.encode(text, add_special=True, max_tokens=self._max_prompt_tokens)

    def chat_prompt(self, body: ChatRequest) -> str:
        """The chat template's prompt for `body`. Every string of the request is marked before the template sees
        it; only the template's markup becomes control tokens. A final assistant message is continued
        (prefill.py). Raises APIError: 501 without a template, 400 when it fails, the prompt error when too long."""
        template = self.config.chat_template
        if template is None:
            raise APIError(501, "chat is off: this server was given no chat template; use /v1/completions")
        messages, variables = [m.for_template() for m in body.messages], body.template_variables()
        if tools := body.active_tools():
            messages, tool_variables = tool_messages(messages, tools, renders_tools(template.source))
            variables = tool_variables | variables
        messages, prefill = split_prefill(messages, body.continue_final_message, body.add_generation_prompt)
        variables = self._guard.neutralize(variables)
        try:
            prompt = template.render(self._guard.neutralize(messages), variables,
                                     body.add_generation_prompt or prefill is not None)
        except RenderedTooLong as e:  # n_chars characters are at least that many bytes
            raise prompt_error(PromptTooLongError(-(-e.n_chars // self._token_bytes), self.first.n_ctx, 1,
                                                  at_least=True)) from None
        except ChatTemplateError as e:
            raise APIError(400, str(e)) from None
        return prompt + self._guard.neutralize(prefill or "")

    def render_chat(self, body: ChatRequest) -> tuple[str, list[int]]:
        """The chat prompt of `body` and its ids, size-checked (raises APIError as chat_prompt and the checks)."""
        prompt = self.chat_prompt(body)
        self._check_text(prompt)
        return prompt, self._guard.encode(prompt, add_special=True, max_tokens=self._max_prompt_tokens)

    async def bridged_chat(self, request: Request, cls: type[BaseModel]) -> tuple[Any, ChatRequest, str, list[int]]:
        """A body of another API (`cls`, which has chat_fields()) read, the chat request it is (chat_bridge.as_chat)
        and that chat's prompt and ids: (body, chat, prompt, ids). Raises APIError (400) as those do."""
        body = await self.read_body(request, cls)
        chat = await in_thread(lambda: as_chat(body.chat_fields(), self.config.sampling))
        prompt, ids = await in_thread(self.render_chat, chat)
        return body, chat, prompt, ids

    def _check_text(self, text: str) -> None:
        try:
            check_prompt_text(text, self.first.n_ctx, self._token_bytes, room=1)
        except PromptError as e:
            raise prompt_error(e) from None

    # ------------------------------------------------------------------------------------------------ reply

    def native_reply(self, body: GenerationRequest, prompt_text: str, return_tokens: bool = False,
                     timings_per_token: bool = False) -> NativeCompletionReply:
        """llama-server's completion reply to a generation of `body` from the prompt `prompt_text` (its ids as
        text, detokenized off the event loop by the caller): native /completion's, and the `__verbose` field."""
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        tokenizer, special = self.first.tokenizer, self.config.special
        return NativeCompletionReply(body.model or self.config.model_name, prompt_text, self.first.n_ctx, stops,
                                     lambda t: token_text(tokenizer, t, special), return_tokens, timings_per_token,
                                     self.pieces.for_request(body.post_sampling_probs))

    # ------------------------------------------------------------------------------------------------ schedule, generate

    async def generate_all(self, request: Request, body: GenerationRequest, prompts: list[list[int]],
                           make_reply: Callable[[int], Reply], endpoint: str,
                           combine: Callable[[list[dict[str, Any]]], Any]) -> Response:
        """body.choices() generations per prompt (choices.py), one after another; make_reply(prompt index)
        answers one generation, `combine` their bodies when there are several. A failed one answers the request.
        Raises APIError (400) for several choices streamed."""
        runs = [(b, ids, i) for i, ids in enumerate(prompts) for b in choice_bodies(body, self.config.default_seed)]
        if len(runs) == 1:
            return await self.generate(request, body, prompts[0], make_reply(0), endpoint)
        if body.stream:
            raise APIError(400, "stream: several choices (n) or prompts in one request are not streamed yet; send "
                                "stream false, or one request per choice")
        bodies = []
        for run_body, ids, i in runs:
            response = await self.generate(request, run_body, ids, make_reply(i), endpoint)
            if response.status_code != 200:
                return response
            bodies.append(json.loads(response.body))
        return JSONResponse(combine(bodies))

    async def generate(self, request: Request, body: GenerationRequest, ids: list[int], reply: Reply,
                       endpoint: str) -> Response:
        """The response to one generation of `body` from the prompt `ids`, in `reply`'s shapes; `endpoint` names
        it in the metrics. The client is watched from here until its response starts: gone while queued or
        generating, the request is dropped (the slot freed) and counted as cancelled (status 499, read by none)."""
        async with DisconnectWatch(request.receive) as watch:
            try:
                return await self._respond(body, ids, reply, endpoint, watch)
            except ClientGone:
                self._metrics.cancelled.inc()
                return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    def _generate_kwargs(self, body: GenerationRequest) -> dict[str, Any]:
        limit = body.token_limit()
        seed = body.seed if body.seed is not None and body.seed >= 0 else self.config.default_seed
        # a server without speculation ignores the override (llama-server: no draft model, no drafting)
        n_max = body.spec_n_max() if self.first.spec_type == "draft-mtp" else None
        return dict(max_tokens=self.first.n_ctx if limit is None else limit, temperature=body.temperature,
                    top_k=body.top_k, top_p=body.top_p, min_p=body.min_p, seed=seed, stop=body.stop,
                    spec_n_max=n_max, cache_prompt=body.cache_prompt, special=self.config.special,
                    logprobs=body.top_probs(), post_sampling_probs=body.post_sampling_probs,
                    **structured_kwargs(body, self.first.tokenizer))

    async def _slot(self, body: GenerationRequest, ids: list[int], watch: DisconnectWatch) -> Model:
        """A slot for `ids` (the one asked for, llama-server's wrap-around), its sequence prepared from the RAM
        prompt cache."""
        wanted = None if body.id_slot == -1 else body.id_slot % self.pool.size
        try:
            model = await watch.unless_gone(self.pool.acquire(ids, slot=wanted))
        except SlotsClosed:
            raise ShuttingDown() from None
        try:
            if self.config.prompt_cache is not None:
                await in_thread(self.config.prompt_cache.prepare, model, ids, body.cache_prompt)
        except BaseException:
            self.pool.release(model)
            raise
        return model

    async def _respond(self, body: GenerationRequest, ids: list[int], reply: Reply, endpoint: str,
                       watch: DisconnectWatch) -> Response:
        try:
            check_prompt(ids, self.first.n_ctx, self.first.n_vocab, room=1)  # room for a token: llama-server's rule
        except PromptError as e:
            raise prompt_error(e) from None
        kwargs = await in_thread(self._generate_kwargs, body)  # a grammar compiles off the event loop
        model = await self._slot(body, ids, watch)
        try:
            # generation() only checks its arguments (a ValueError is the request's fault): the work runs on the
            # scheduler's thread, with the other slots' generations
            handle = self._scheduler.submit(model.generation(ids, **kwargs),
                                            progress=body.stream and body.return_progress)
        except BaseException as e:
            self.pool.release(model)
            if isinstance(e, ValueError):
                raise APIError(400, str(e)) from None
            raise
        limit = body.token_limit()
        params = task_params(kwargs, -1 if limit is None else limit, body.stream, model.spec, body.ignore_eos)
        task = self.tasks.begin(self.pool.models.index(model), params, len(ids), handle.stream)
        reply.bind(task)
        # llama-server's __verbose: an OpenAI-shaped body that is not streamed carries the native one
        verbose = self.native_reply(body, await in_thread(token_text, self.first.tokenizer, ids)) \
            if body.verbose and reply.carries_verbose else None
        if verbose is not None:
            verbose.bind(task)
        if body.stream:
            events = reply_events(handle.stream, reply, self._stopping.cut, partial(self._observe, endpoint, task),
                                  self._metrics.cancelled.inc)
            return EventStream(events, partial(self._release, handle, model))
        try:
            result = await in_thread(finish_unless, handle, (watch.gone, self._stopping.cut))
        finally:
            await self._release(handle, model)
        if result is None:
            if watch.gone.is_set():
                raise ClientGone()
            raise ShuttingDown(": the generation was stopped")
        self._observe(endpoint, task, result)
        out = reply.whole(result)
        if verbose is not None:
            out["__verbose"] = verbose.whole(result)
        return JSONResponse(out)

    async def _release(self, handle: ScheduledGeneration, model: Model) -> None:
        # the slot goes back once the scheduler no longer touches its sequence (at once when the generation ended)
        handle.cancel()
        if not handle.done:
            await in_thread(handle.wait)
        self.pool.release(model)

    def _observe(self, endpoint: str, task: SlotTask, result: GenerationResult) -> None:
        self._metrics.observe(endpoint, result.metrics)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s", prompt_cache_line(task, result.metrics))
