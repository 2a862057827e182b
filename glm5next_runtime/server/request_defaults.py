"""The server-wide request defaults (--temp, --top-k, --top-p, --min-p, -n/--n-predict, --reasoning-format,
--reasoning-budget, -v): what a request that leaves a field out gets, as llama-server's flags mean them. -n is the token
limit of a request that sets none (or -1); a request's own limit wins, larger or not ("the per-request limit takes
priority over the global one", llama-server's server-context.cpp). --reasoning-budget takes llama-server's two
values: -1 (thinking as the template and request say) and 0 (thinking off: enable_thinking false for a chat whose
request does not say otherwise)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from .schemas import ChatRequest, GenerationRequest

Body = TypeVar("Body", bound=GenerationRequest)
NO_LIMIT = -1  # llama-server's n_predict for "until the end of generation or the context"


@dataclass(frozen=True)
class RequestDefaults:
    """llama-server's defaults unless the flags say otherwise."""
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    n_predict: int = NO_LIMIT
    reasoning_format: str | None = None  # None: the request's default (reasoning split off when a think block opens)
    reasoning_budget: int = -1
    verbose: bool = False  # -v: every response that is not streamed carries __verbose (llama-server's --verbose)

    def apply(self, body: Body) -> Body:
        """`body` with the sampler fields it left out set to these defaults, n_predict as its token limit when it
        has none (as the n_predict field, which token_limit() reads first), and for a chat the reasoning defaults."""
        update = {name: getattr(self, name) for name in ("temperature", "top_k", "top_p", "min_p", "verbose")
                  if name not in body.model_fields_set}
        limit = body.token_limit()
        if self.n_predict != NO_LIMIT and limit is None:
            update["n_predict"] = self.n_predict
        if isinstance(body, ChatRequest):
            if self.reasoning_format is not None and "reasoning_format" not in body.model_fields_set:
                update["reasoning_format"] = self.reasoning_format
            variables = body.chat_template_kwargs or {}
            if self.reasoning_budget == 0 and "enable_thinking" not in variables and body.reasoning_effort is None:
                update["chat_template_kwargs"] = variables | {"enable_thinking": False}
        return body.model_copy(update=update) if update else body
