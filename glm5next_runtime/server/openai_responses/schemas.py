"""The request body of OpenAI's Responses API (POST /v1/responses) and the chat request it is, as llama-server
converts it (server_chat_convert_responses_to_chatcmpl, read, not copied): `instructions` becomes a system message,
`input` (a string: one user message; or items) the messages, `max_output_tokens` the token limit,
`reasoning.effort` chat's reasoning_effort; every other field is passed to the chat request as it is, so chat
completions' fields (and llama-server's: top_k, min_p, seed, stop, speculative.n_max, chat_template_kwargs,
parallel_tool_calls, ...) mean here what they mean there, and what chat refuses is refused here too. Function calling (`tools`, `tool_choice`, function_call and function_call_output
items) is tools.py's.

Input items: messages (role user, system, developer or assistant; content a string or text parts: input_text, and
output_text for the assistant's), and reasoning items (their reasoning_text goes to the next assistant message's
reasoning_content, as llama-server merges them), function calls and their outputs. Other items, images, files and
audio (a text-only model) are a 400 naming the item.

Nothing is stored: `previous_response_id` and `conversation` (server-side state) are refused, as llama-server
refuses previous_response_id; `store` is ignored (it only asks OpenAI to keep the response for later retrieval, and
the response is returned all the same), as is `include` (extra output such as encrypted reasoning, which this
server does not have). `background` (asynchronous responses, fetched later), `prompt` (stored prompt templates),
`text.format` other than text (structured output) and `top_logprobs` are refused: not implemented yet.
"""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..errors import APIError
from .items import Item, Part
from .tools import FunctionTool, add_call, call_output, chat_tool_choice, chat_tools
from ..schemas import STRICT, never, null_only, off, refused

STORED_STATE = "this server stores no responses or conversations: send the whole conversation in `input`"


class Reasoning(BaseModel):
    model_config = STRICT
    effort: str | None = Field(None, description="chat's reasoning_effort (\"none\": no think block)")


def text_format(value: Any) -> bool:
    """Whether `text` asks for plain text (what refused() lets through)."""
    return isinstance(value, dict) and (value.get("format") or {"type": "text"}) == {"type": "text"}


class ResponsesRequest(BaseModel):
    """POST /v1/responses. Fields not declared here are chat completions' (see the module docstring)."""
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    model: str | None = Field(None, description="any name: echoed in the response (llama-server with one model)")
    input: str | list[Item]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=0, description="the most tokens to generate")
    reasoning: Reasoning | None = None
    stream: bool = False
    tools: list[FunctionTool] | None = None
    tool_choice: Any = None
    previous_response_id: Annotated[Any, AfterValidator(null_only(STORED_STATE))] = None
    conversation: Annotated[Any, AfterValidator(null_only(STORED_STATE))] = None
    background: refused("background responses", off(False)) = None
    prompt: refused("stored prompt templates", never) = None
    text: refused("structured output (text.format other than text)", text_format) = None
    top_logprobs: refused("log-probabilities on /v1/responses", off(0)) = None

    def chat_fields(self) -> dict[str, Any]:
        """The fields of the chat request (schemas.ChatRequest) this request is. Raises APIError (400) naming an
        input item or part this server cannot read."""
        fields = dict(self.model_extra or {}) | {"stream": self.stream, "messages": self.messages()}
        if self.tools:
            fields["tools"] = chat_tools(self.tools)
        if self.tool_choice is not None:
            fields["tool_choice"] = chat_tool_choice(self.tool_choice)
        if self.max_output_tokens is not None:
            fields["max_tokens"] = self.max_output_tokens
        if self.reasoning is not None and self.reasoning.effort is not None:
            fields.setdefault("reasoning_effort", self.reasoning.effort)
        return fields

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of `instructions` and `input`."""
        out = [] if self.instructions is None else [{"role": "system", "content": self.instructions}]
        if isinstance(self.input, str):
            return out + [{"role": "user", "content": self.input}]
        for i, item in enumerate(self.input):
            add_item(out, item, f"input.{i}")
        return out


def add_item(messages: list[dict[str, Any]], item: Item, where: str) -> None:
    """Append input item `item` to the chat `messages`: an assistant's text or reasoning goes into the assistant
    message before it, when there is one (as llama-server merges them)."""
    last = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
    if item.type == "reasoning":
        text = item_text(item, where, ("reasoning_text",))
        if not text:
            return  # a summary or encrypted content only: nothing this server can render
        if last is None:
            messages.append({"role": "assistant", "content": "", "reasoning_content": text})
        else:
            last["reasoning_content"] = last.get("reasoning_content", "") + text
        return
    if item.type == "function_call":
        add_call(messages, item, where)
        return
    if item.type == "function_call_output":
        if item.output is None:
            raise APIError(400, f"{where}.output: Field required")
        output = item.output if isinstance(item.output, str) else "".join(
            part_text(p, f"{where}.output.{j}", ("input_text",)) for j, p in enumerate(item.output))
        messages.append(call_output(item, where, output))
        return
    if item.type != "message":
        raise APIError(400, f"{where}: {item.type} item: this server reads message, reasoning, function_call and "
                            "function_call_output items")
    if item.role is None or item.content is None:
        raise APIError(400, f"{where}.{'role' if item.role is None else 'content'}: Field required")
    text = item_text(item, where, ("output_text", "input_text") if item.role == "assistant" else ("input_text",))
    if item.role == "assistant" and last is not None:
        last["content"] += text
    else:
        messages.append({"role": item.role, "content": text})


def item_text(item: Item, where: str, kinds: tuple[str, ...]) -> str:
    """The text of an item's content: a string, or its parts' (of `kinds`) joined."""
    if item.content is None or isinstance(item.content, str):
        return item.content or ""
    return "".join(part_text(p, f"{where}.content.{j}", kinds) for j, p in enumerate(item.content))


def part_text(part: Part, where: str, kinds: tuple[str, ...]) -> str:
    """The text of a content part of one of `kinds`; raises APIError (400) naming the part otherwise."""
    if part.type not in kinds:
        raise APIError(400, f"{where}: {part.type} part: this server reads {' and '.join(kinds)} parts only "
                            "(a text-only model)")
    if part.text is None:
        raise APIError(400, f"{where}.text: Field required")
    return part.text
