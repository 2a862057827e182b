"""Anthropic's tool use as chat completions has it (llama-server's server_chat_convert_anthropic_to_oai, read, not
copied), so that the chat's machinery (server/tool_prompt.py, tool_replies.py) does the rest:

    tools [{name, description, input_schema}]   chat's tools [{"type": "function", "function": {name, description,
                                                parameters}}]
    tool_choice {"type": auto | none}            chat's "auto" | "none" (none: the tools are left out of the prompt);
                                                disable_parallel_tool_use is parallel_tool_calls false
    tool_choice {"type": any | tool, "name"}     chat's "required" | a named function: a grammar forces the reply
                                                to be calls (of that function), as on chat
    an assistant's tool_use {id, name, input}     an entry of its message's tool_calls
    a user's tool_result {tool_use_id, content}   a tool message (content: a string or text blocks joined); with
                                                is_error its content starts with "Error: " (a chat message has no
                                                other way to say it; llama-server drops is_error)

Anthropic's server tools (a `type` other than "custom": web search, code execution, ...) run on Anthropic's side
and are a 400 naming the tool.
"""
from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from .blocks import Block
from ..errors import APIError
from ..schemas import STRICT

CHOICES = {"auto": "auto", "none": "none", "any": "required"}


class Tool(BaseModel):
    """A tool the model may call: a client tool (no type, or "custom") is a function."""
    model_config = STRICT
    type: str | None = None
    name: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoice(BaseModel):
    model_config = STRICT
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


def tool_fields(tools: list[Tool] | None, choice: ToolChoice | None) -> dict[str, Any]:
    """The chat request's tools, tool_choice and parallel_tool_calls. Raises APIError (400) naming a tool or
    field this server cannot take."""
    out: dict[str, Any] = {}
    if tools:
        out["tools"] = [chat_tool(t, f"tools.{i}") for i, t in enumerate(tools)]
    if choice is not None:
        if choice.type == "tool" and choice.name is None:
            raise APIError(400, "tool_choice.name: Field required")
        out["tool_choice"] = CHOICES.get(choice.type) or {"type": "function", "function": {"name": choice.name}}
        out["parallel_tool_calls"] = not choice.disable_parallel_tool_use
    return out


def chat_tool(tool: Tool, where: str) -> dict[str, Any]:
    """One of chat's tools."""
    if tool.type not in (None, "custom"):
        raise APIError(400, f"{where}: {tool.type} tool: Anthropic's server tools do not run here (a client tool "
                            "has no type, or \"custom\")")
    for field in ("name", "input_schema"):
        if getattr(tool, field) is None:
            raise APIError(400, f"{where}.{field}: Field required")
    function = {"name": tool.name, "parameters": tool.input_schema}
    return {"type": "function", "function": function | ({"description": tool.description}
                                                        if tool.description is not None else {})}


def tool_call(block: Block, where: str) -> dict[str, Any]:
    """The chat tool_calls entry of an assistant's tool_use block."""
    for field in ("id", "name", "input"):
        if getattr(block, field) is None:
            raise APIError(400, f"{where}.{field}: Field required")
    return {"id": block.id, "type": "function",
            "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}}


def tool_message(block: Block, where: str, text: str) -> dict[str, Any]:
    """The chat tool message of a user's tool_result block whose content is `text`."""
    if block.tool_use_id is None:
        raise APIError(400, f"{where}.tool_use_id: Field required")
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": f"Error: {text}" if block.is_error else text}
