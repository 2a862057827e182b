"""The server-wide sampling defaults (--temp, --top-k, --top-p, --min-p, -n/--n-predict): what a request that leaves
a field out gets, as llama-server's flags mean them. -n is the token limit of a request that sets none (or -1); a
request's own limit wins, larger or not ("the per-request limit takes priority over the global one", llama-server's
server-context.cpp)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from .schemas import GenerationRequest

Body = TypeVar("Body", bound=GenerationRequest)
NO_LIMIT = -1  # llama-server's n_predict for "until the end of generation or the context"


@dataclass(frozen=True)
class SamplingDefaults:
    """llama-server's defaults unless the flags say otherwise."""
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    n_predict: int = NO_LIMIT

    def apply(self, body: Body) -> Body:
        """`body` with the sampler fields it left out set to these defaults, and n_predict as its token limit when
        it has none (as the n_predict field, which token_limit() reads first)."""
        update = {name: getattr(self, name) for name in ("temperature", "top_k", "top_p", "min_p")
                  if name not in body.model_fields_set}
        limit = body.token_limit()
        if self.n_predict != NO_LIMIT and limit is None:
            update["n_predict"] = self.n_predict
        return body.model_copy(update=update) if update else body
