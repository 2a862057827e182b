"""The request bodies every API surface becomes (pydantic: a wrong type or range is a 400, see errors.py): the
sampling and generation fields all generations share (GenerationRequest) and OpenAI's chat request (ChatRequest),
which the other APIs' bodies are converted into (chat_bridge.py). A surface's own bodies extend these in its package
(openai_chat/schemas.py, native/schemas.py, ...).

Strict types (no "5" for 5). Sampling defaults are llama-server's. Every number has a range the engine can take (a
400 naming the field, never an overflow in the native code), and a chat message's role is one a chat template
knows (a role is markup: "<|{{ role }}|>").

Every field of OpenAI's completion and chat requests and of llama-server's extensions is honoured, refused or
ignored on purpose; docs/server-fields.md is the table. A field the server cannot honour yet is declared here as
refused(): null, or a value that asks for nothing (false, 0, llama-server's value that turns the feature off),
passes; anything else is a 400 naming the field. Fields not declared are ignored, as llama-server ignores what it
does not know (clients send their vendors' extras); the table says which are ignored on purpose, and why.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

STRICT = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, populate_by_name=True)
INT32_MAX = 2**31 - 1  # the engine's int parameters (top_k, n_max)
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # the engine's seed is 64-bit unsigned; negative: the server's
# Most probable tokens reported per generated token: OpenAI's chat top_logprobs bound, and this server's for
# completions' logprobs and llama-server's n_probs (llama-server bounds them by the vocabulary only; each one adds
# ~100 bytes to a reply per generated token, so a bound keeps a reply's size in check)
MAX_TOP_LOGPROBS = 20
MAX_N_PROBS = 100
# choices per prompt (n): each is a generation of its own, run one after another; a bound keeps one request's work
# in check (llama-server bounds n by its slots)
MAX_CHOICES = 16
ROLES = ("system", "user", "assistant", "tool")  # OpenAI's, the ones GLM's templates write
# OpenAI's newer name for the system role (what reasoning-model clients send): rendered as "system"
ROLE_ALIASES = {"developer": "system"}


def off(*values: Any) -> Callable[[Any], bool]:
    """refused()'s test for a field whose `values` ask for nothing."""
    return lambda value: value in values


def never(_value: Any) -> bool:
    """refused()'s test for a field that asks for something whatever its value (null aside)."""
    return False


def refused(what: str, asks_nothing: Callable[[Any], bool]) -> Any:
    """The type of a field whose feature, `what`, this server does not have yet: null or a value for which
    `asks_nothing` holds passes (and changes nothing); any other value, of any type, is a 400 naming the field."""
    def check(value: Any) -> Any:
        try:
            fine = value is None or asks_nothing(value)
        except TypeError:  # e.g. "high" <= 0: not a value that turns the feature off
            fine = False
        if not fine:
            raise PydanticCustomError("not_supported", "this server does not support {what} yet (leave the field "
                                      "out, or send null)", {"what": what})
        return value
    return Annotated[Any, AfterValidator(check)]


def null_only(why: str) -> Callable[[Any], Any]:
    """An AfterValidator for a field this endpoint does not have (`why`): null passes, anything else is a 400
    naming the field."""
    def check(value: Any) -> Any:
        if value is not None:
            raise PydanticCustomError("wrong_endpoint", "{why}", {"why": why})
        return value
    return check


class StreamOptions(BaseModel):
    """OpenAI's stream_options."""
    model_config = STRICT
    include_usage: bool = Field(False, description="a last chunk with `choices: []` and the usage, before [DONE]")


class Speculative(BaseModel):
    """The per-request speculative override, as {"speculative": {"n_max": N}}."""
    model_config = STRICT
    n_max: int | None = Field(None, ge=0, le=INT32_MAX, description="draft tokens per round; 0 = no speculation")


class JsonSchemaFormat(BaseModel):
    """OpenAI's response_format.json_schema: the schema is honoured, the rest describes it."""
    model_config = STRICT
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema", description="None: any JSON value")
    strict: bool | None = Field(None, description="the output always follows the schema, strict or not")


class ResponseFormat(BaseModel):
    """OpenAI's response_format (see server/structured.py)."""
    model_config = STRICT
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    # llama-server's json_object may carry a schema too
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")


def logit_bias_pairs(value: Any) -> list[tuple[int | str, float | bool]] | None:
    """logit_bias as (token id or text, bias) pairs, from OpenAI's {"id": bias} or llama-server's [[id or text,
    bias], ...]; a bias is a finite number or false (llama-server's ban). Anything else is a 400 naming the field."""
    if value is None:
        return None
    pairs = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list) or not all(isinstance(p, list | tuple) and len(p) == 2 for p in pairs):
        raise PydanticCustomError("logit_bias_shape", 'expected {"token id or text": bias, ...} or [[token id or '
                                  'text, bias], ...]')
    for key, bias in pairs:
        if isinstance(key, bool) or not isinstance(key, int | str):
            raise PydanticCustomError("logit_bias_token", "a token is an id or a text, got {key}", {"key": repr(key)})
        number = isinstance(bias, int | float) and not isinstance(bias, bool) and math.isfinite(bias)
        if not (number or bias is False):
            raise PydanticCustomError("logit_bias_value", "token {key}: a bias is a number, or false to ban the "
                                      "token, got {bias}", {"key": repr(key), "bias": repr(bias)})
    return [tuple(p) for p in pairs]


class GenerationRequest(BaseModel):
    """The fields /v1/completions and /v1/chat/completions share."""
    model_config = STRICT

    model: str | None = Field(None, description="any name: echoed in the response (llama-server with one model)")
    # the token limit under its three names: see token_limit
    max_tokens: int | None = Field(None, ge=-1, description="None or -1 (what llama.cpp's web UI sends): until the "
                                   "end of generation or the context")
    max_completion_tokens: int | None = Field(None, ge=0, description="OpenAI's newer name for max_tokens")
    n_predict: int | None = Field(None, ge=-1, description="llama-server's name; -1: no limit")
    temperature: float = Field(0.8, description="<= 0: greedy")
    top_k: int = Field(40, ge=0, le=INT32_MAX, description="0: off")
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX, description="None or negative: the server's --seed")
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    cache_prompt: bool = Field(True, description="llama-server's: resume from the slot's cached prefix and "
                               "evaluate only the rest (the output is the same)")
    n: int = Field(1, ge=1, le=MAX_CHOICES, description="choices per prompt (llama-server's n_cmpl); they run one "
                   "after another, choice i > 0 with the seed plus i")
    n_cmpl: int | None = Field(None, ge=1, le=MAX_CHOICES, description="llama-server's name for n, which it "
                               "overrides")
    verbose: bool = Field(False, description="llama-server's: a response that is not streamed carries __verbose, "
                          "the native /completion body of its generation")
    speculative: Speculative | None = None
    # llama-server's spelling: a flat dotted key
    speculative_n_max: int | None = Field(None, ge=0, le=INT32_MAX, alias="speculative.n_max")
    id_slot: int = Field(-1, ge=-1, le=INT32_MAX, description="llama-server's: the slot to run on (past the last "
                         "it wraps around); -1: any")
    # log-probabilities (see top_probs): OpenAI's completions count (chat overrides it), llama-server's count
    logprobs: int | None = Field(None, ge=0, le=MAX_N_PROBS, description="OpenAI's completions field: each "
                                 "generated token's log-probability and the N most probable tokens'; 0: its own only")
    n_probs: int | None = Field(None, ge=0, le=MAX_N_PROBS, description="llama-server's: the N most probable "
                                "tokens' log-probabilities with each generated token's; 0: none")
    post_sampling_probs: bool = Field(False, description="llama-server's: the probabilities (n_probs, logprobs) "
                                      "are those of the distribution the sampler drew from, its filters and "
                                      "temperature applied (`prob`, `top_probs`: at most the tokens that survived "
                                      "them), not the model's log-probabilities")

    # structured output and logit bias (server/structured.py)
    response_format: ResponseFormat | None = None
    json_schema: dict[str, Any] | bool | None = Field(None, description="llama-server's: JSON output under this "
                                                      "schema")
    grammar: str | None = Field(None, description="llama-server's: a GBNF grammar (or llguidance's Lark); \"\" "
                                "is none")
    logit_bias: Annotated[Any, AfterValidator(logit_bias_pairs)] = Field(
        None, description="OpenAI's {\"token id\": bias} or llama-server's [[id or text, bias]]; false bans")
    ignore_eos: bool = Field(False, description="llama-server's: the end-of-generation tokens are banned (a -inf "
                             "logit bias), so the generation runs to its token limit or the context's end")

    # Not yet (docs/server-fields.md): OpenAI's ...
    tools: refused("tools on this endpoint (chat completions has them)", off([])) = None
    tool_choice: refused("tools on this endpoint (chat completions has them)", off("none", "auto")) = None
    functions: refused("function calls", off([])) = None
    function_call: refused("function calls", off("none", "auto")) = None
    presence_penalty: refused("presence and frequency penalties", off(0)) = None
    frequency_penalty: refused("presence and frequency penalties", off(0)) = None
    echo: refused("echoing the prompt", off(False)) = None
    best_of: refused("best_of (several candidates per choice)", off(1)) = None
    suffix: refused("suffix (text after the completion)", off("")) = None
    audio: refused("audio output", never) = None
    modalities: refused("output modalities other than text", off(["text"])) = None
    web_search_options: refused("web search", never) = None
    verbosity: refused("verbosity", off("medium")) = None
    # ... and llama-server's
    grammar_lazy: refused("lazy grammars (applied only after a trigger)", off(False)) = None
    samplers: refused("a sampler order of the client's", never) = None
    dynatemp_range: refused("dynamic temperature", off(0)) = None
    top_n_sigma: refused("top-n-sigma sampling", lambda v: v <= 0) = None
    typical_p: refused("locally typical sampling", off(1)) = None
    xtc_probability: refused("XTC sampling", off(0)) = None
    repeat_penalty: refused("repetition penalties", off(1)) = None
    dry_multiplier: refused("DRY sampling", off(0)) = None
    mirostat: refused("Mirostat sampling", off(0)) = None
    min_keep: refused("min_keep", off(0)) = None
    n_indent: refused("n_indent", off(0)) = None
    t_max_predict_ms: refused("a time limit on generation", off(0)) = None
    return_tokens: refused("returning token ids", off(False)) = None
    timings_per_token: bool = Field(False, description="llama-server's: stream chunks carry the generation's "
                                    "timings so far (native and Responses streams)")
    return_progress: bool = Field(False, description="llama-server's: a stream carries prompt_progress events ({total, "
                                  "cache, processed, time_ms}) when the prompt starts and as its ubatches are "
                                  "evaluated, before the first token")
    response_fields: refused("response_fields", off([])) = None
    lora: refused("LoRA adapters", off([])) = None

    def grammar_field(self) -> str | None:
        """The first field that asks for a grammar (structured output: response_format json_object or
        json_schema, json_schema, grammar), None when none does."""
        if self.response_format is not None and self.response_format.type != "text":
            return "response_format"
        if self.json_schema is not None:
            return "json_schema"
        return "grammar" if self.grammar else None

    def spec_n_max(self) -> int | None:
        """Drafts per round asked for by this request (flat key first), None when it asks nothing."""
        if self.speculative_n_max is not None:
            return self.speculative_n_max
        return self.speculative.n_max if self.speculative else None

    def token_limit(self) -> int | None:
        """Most tokens to generate; None: no limit but the context. Of the limit's three names the first present
        wins, as in llama-server (server-task.cpp, params_from_json_cmpl): n_predict, then max_completion_tokens,
        then max_tokens; -1 (llama-server's n_predict default; max_tokens from llama.cpp's web UI) is no limit,
        whatever the others say."""
        for limit in (self.n_predict, self.max_completion_tokens, self.max_tokens):
            if limit is not None:
                return None if limit == -1 else limit
        return None

    def choices(self) -> int:
        """Choices per prompt: n_cmpl, else n (llama-server reads n as n_cmpl's alias)."""
        return self.n_cmpl or self.n

    def include_usage(self) -> bool:
        """Whether a stream ends with OpenAI's usage chunk (stream_options.include_usage)."""
        return self.stream_options is not None and self.stream_options.include_usage

    def top_probs(self) -> int | None:
        """How many most probable tokens to report with each generated token's log-probability (Model.generate's
        logprobs); None: no log-probabilities. As llama-server (params_from_json_cmpl): n_probs when it asks for
        some, else the OpenAI field (completions' logprobs count: 0 is the token's own only)."""
        return self.n_probs if self.n_probs else self.logprobs


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


class FunctionSpec(BaseModel):
    """A function the model may call: its name, what it does, its parameters' JSON schema."""
    model_config = ConfigDict(strict=True, extra="allow")
    name: str = Field(min_length=1, max_length=256, pattern=r"^[^\s<>]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    """One of OpenAI's `tools`: {"type": "function", "function": {...}}."""
    model_config = ConfigDict(strict=True, extra="allow")
    type: Literal["function"]
    function: FunctionSpec


class FunctionName(BaseModel):
    model_config = STRICT
    name: str


class NamedToolChoice(BaseModel):
    """tool_choice naming the function to call: {"type": "function", "function": {"name": ...}}."""
    model_config = STRICT
    type: Literal["function"]
    function: FunctionName


class ChatRequest(GenerationRequest):
    """POST /v1/chat/completions."""
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] | None = Field(None, description="functions the model may call: described in the prompt, "
                                         "its calls returned as tool_calls (../tool_calls.py)")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="auto (default): the model decides; none: the tools are left out of the prompt; required "
        "or a named function: a grammar forces the reply to be calls (of that function)")
    parallel_tool_calls: bool = Field(True, description="false: at most one call is returned (the first)")
    logprobs: bool | None = Field(None, description="OpenAI's chat field: each generated token's log-probability "
                                  "(and top_logprobs' most probable tokens')")
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS, description="most probable tokens reported "
                                     "with each generated token; needs logprobs: true")
    chat_template_kwargs: dict[str, Any] | None = Field(None, description="extra template variables, "
                                                        "e.g. {\"enable_thinking\": false}")
    reasoning_effort: str | None = Field(None, description="llama-server's meaning: \"none\" turns thinking off, "
                                         "any value is the template variable reasoning_effort")
    reasoning_format: Literal["auto", "deepseek", "none"] | None = Field(
        None, description="llama-server's: \"none\" leaves the reasoning in content; otherwise it goes to "
        "reasoning_content when the template opens a think block")
    add_generation_prompt: bool = Field(True, description="end the prompt with the template's assistant header "
                                        "(llama-server's field)")
    continue_final_message: bool | None = Field(None, description="continue the last message, the assistant's, "
                                                "instead of starting a new one (vLLM's field); None: when the chat "
                                                "ends with an assistant message, as llama-server does")

    def active_tools(self) -> list[dict[str, Any]]:
        """The tools to put in the prompt ([] with none, or with tool_choice "none"), as OpenAI sends them."""
        if not self.tools or self.tool_choice == "none":
            return []
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def forced_tool(self) -> tuple[bool, str | None]:
        """(whether tool_choice forces calls, the function it names or None for any)."""
        if isinstance(self.tool_choice, NamedToolChoice):
            return True, self.tool_choice.function.name
        return self.tool_choice == "required", None

    def grammar_field(self) -> str | None:
        return super().grammar_field() or ("tool_choice" if self.forced_tool()[0] else None)

    @model_validator(mode="after")
    def _forced_call_needs_its_tool(self) -> ChatRequest:
        forced, name = self.forced_tool()
        names = [t.function.name for t in self.tools or ()]
        if forced and not names:
            raise PydanticCustomError("tool_choice", "tool_choice: forces a call, and the request has no tools")
        if name is not None and name not in names:
            raise PydanticCustomError("tool_choice", "tool_choice: no function named {name} among the tools",
                                      {"name": repr(name)})
        return self

    def template_variables(self) -> dict[str, Any]:
        """The chat template's variables besides the messages: reasoning_effort as llama-server passes it, then
        chat_template_kwargs (which win: {"enable_thinking": true} with reasoning_effort "none" thinks). A grammar
        turns thinking off too (structured output starts at the reply's first token), unless the kwargs say
        otherwise."""
        out: dict[str, Any] = {}
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.reasoning_effort == "none" or self.grammar_field() is not None:
            out["enable_thinking"] = False
        return out | (self.chat_template_kwargs or {})

    @model_validator(mode="after")
    def _top_logprobs_needs_logprobs(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:  # OpenAI's rule (llama-server's too)
            raise PydanticCustomError("logprobs_needed", "top_logprobs: needs `logprobs: true`")
        return self

    def top_probs(self) -> int | None:
        """As GenerationRequest.top_probs, with OpenAI's chat fields first (llama-server's order): logprobs true
        reports top_logprobs most probable tokens (none when absent, as OpenAI; llama-server's default is 20), else
        n_probs decides."""
        if self.logprobs:
            return self.top_logprobs or 0
        return self.n_probs or None

    def splits_reasoning(self) -> bool:
        """Whether reasoning goes to reasoning_content (when the prompt opens a think block)."""
        return self.reasoning_format != "none"
