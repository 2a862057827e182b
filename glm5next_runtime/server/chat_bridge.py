"""The chat request that a request of another API (Anthropic's Messages, OpenAI's Responses) is: those endpoints
convert their body into chat completions' fields and go the chat's way from there (template, guard, slots, prompt
cache, draft-MTP, cancellation, metrics), as llama-server converts them. Unlike chat completions' own body, the
converted one may have no messages: llama-server answers an Anthropic request with none (its prompt is the template's
generation prompt alone)."""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..tool_calls import argument_schemas
from .errors import invalid_body
from .request_defaults import RequestDefaults
from .schemas import ChatRequest, Message
from .tool_replies import ToolCalls


class BridgedChatRequest(ChatRequest):
    """A chat request converted from another API's body: as ChatRequest, messages may be empty."""
    messages: list[Message] = []


def as_chat(fields: dict[str, Any], sampling: RequestDefaults) -> ChatRequest:
    """ChatRequest of `fields` (its own names) with the server's sampling defaults for what they leave out. Raises
    APIError (400) naming the field that does not validate."""
    try:
        chat = BridgedChatRequest.model_validate(fields)
    except ValidationError as e:
        raise invalid_body(e) from None
    return sampling.apply(chat)


def reply_tools(chat: ChatRequest) -> ToolCalls | None:
    """How the reply to `chat` is read for tool calls, as chat completions reads it (None: no tools in the prompt)."""
    tools = chat.active_tools()
    return ToolCalls(argument_schemas(tools), chat.parallel_tool_calls) if tools else None
