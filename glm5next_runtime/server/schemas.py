"""Request bodies of the OpenAI-compatible endpoints (pydantic: a wrong type or range is a 400, see errors.py).

Strict types (no "5" for 5), unknown fields ignored (clients send fields this server has no use for). Sampling
defaults are llama-server's. Every number has a range the engine can take (a 400 naming the field, never an
overflow in the native code), and a chat message's role is one a chat template knows (a role is markup:
"<|{{ role }}|>").
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

STRICT = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, populate_by_name=True)
INT32_MAX = 2**31 - 1  # the engine's int parameters (top_k, n_max)
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # the engine's seed is 64-bit unsigned; negative: the server's
ROLES = ("system", "user", "assistant", "tool")  # OpenAI's, the ones GLM's templates write
# OpenAI's newer name for the system role (what reasoning-model clients send): rendered as "system"
ROLE_ALIASES = {"developer": "system"}


class Speculative(BaseModel):
    """The per-request speculative override, as {"speculative": {"n_max": N}}."""
    model_config = STRICT
    n_max: int | None = Field(None, ge=0, le=INT32_MAX, description="draft tokens per round; 0 = no speculation")


class GenerationRequest(BaseModel):
    """The fields /v1/completions and /v1/chat/completions share."""
    model_config = STRICT

    model: str | None = None
    max_tokens: int | None = Field(None, ge=0, description="None: until the end of generation or the context")
    temperature: float = Field(0.8, description="<= 0: greedy")
    top_k: int = Field(40, ge=0, le=INT32_MAX, description="0: off")
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX, description="None or negative: the server's --seed")
    stop: str | list[str] | None = None
    stream: bool = False
    cache_prompt: bool = Field(True, description="llama-server's: resume from the slot's cached prefix and "
                               "evaluate only the rest (the output is the same)")
    n: int = Field(1, ge=1, le=1, description="choices per request (only 1)")
    speculative: Speculative | None = None
    # llama-server's spelling: a flat dotted key
    speculative_n_max: int | None = Field(None, ge=0, le=INT32_MAX, alias="speculative.n_max")

    def spec_n_max(self) -> int | None:
        """Drafts per round asked for by this request (flat key first), None when it asks nothing."""
        if self.speculative_n_max is not None:
            return self.speculative_n_max
        return self.speculative.n_max if self.speculative else None

    def token_limit(self) -> int | None:
        """Most tokens to generate; None: no limit but the context."""
        return self.max_tokens


class CompletionRequest(GenerationRequest):
    """POST /v1/completions: one prompt, as text or token ids."""
    prompt: str | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class TextPart(BaseModel):
    model_config = STRICT
    type: Literal["text"]
    text: str


class Message(BaseModel):
    """A chat message. Fields beyond role and content (name, reasoning_content, tool_calls, ...) are kept and
    passed to the chat template as they came."""
    model_config = ConfigDict(strict=True, extra="allow")
    role: Literal[ROLES + tuple(ROLE_ALIASES)]  # type: ignore[valid-type]
    content: str | list[TextPart] | None = None

    def for_template(self) -> dict[str, Any]:
        """The message as the template sees it: text parts joined into one content string, an aliased role
        (developer) under the template's own name (system)."""
        out = self.model_dump(exclude_none=True)
        out["role"] = ROLE_ALIASES.get(self.role, self.role)
        if isinstance(self.content, list):
            out["content"] = "".join(part.text for part in self.content)
        return out


class ChatRequest(GenerationRequest):
    """POST /v1/chat/completions."""
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0, description="OpenAI's newer name for max_tokens")
    chat_template_kwargs: dict[str, Any] | None = Field(None, description="extra template variables, "
                                                        "e.g. {\"enable_thinking\": false}")

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
