"""OpenAI Responses' function calling as chat completions has it (as llama-server converts it), so that the chat's
machinery (server/tool_prompt.py, tool_replies.py) does the rest:

    tools [{"type": "function", name, description, parameters}]   chat's tools, nested: {"type": "function",
                                                                  "function": {name, description, parameters}}
    tool_choice "auto" | "none" | "required"                       chat's ("required": a grammar forces calls)
    tool_choice {"type": "function", "name"}                       chat's named function (a call of it, forced)
    input item function_call {call_id, name, arguments}            an entry of the assistant message's tool_calls
                                                                  (the message before it, when it is the
                                                                  assistant's, as llama-server merges them)
    input item function_call_output {call_id, output}              a tool message (output: a string or input_text
                                                                  parts joined)

Tools of other types (web_search, file_search, mcp, custom, ...) are OpenAI's hosted tools or a grammar-bound
format this server does not have: a 400 naming the tool.
"""
from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from ..errors import APIError
from .items import Item
from ..schemas import STRICT



class FunctionTool(BaseModel):
    """One of `tools`: a function (other types are refused by chat_tools)."""
    model_config = STRICT
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


def chat_tools(tools: list[FunctionTool]) -> list[dict[str, Any]]:
    """Chat's tools of the request's; raises APIError (400) naming a tool that is not a function."""
    out = []
    for i, tool in enumerate(tools):
        if tool.type != "function":
            raise APIError(400, f"tools.{i}: {tool.type} tool: this server runs function tools only")
        if tool.name is None:
            raise APIError(400, f"tools.{i}.name: Field required")
        out.append({"type": "function",
                    "function": tool.model_dump(include={"name", "description", "parameters"}, exclude_none=True)})
    return out


def chat_tool_choice(choice: Any) -> Any:
    """Chat's tool_choice of the request's: a named function nested as chat has it, anything else as it is."""
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def add_call(messages: list[dict[str, Any]], item: Item, where: str) -> None:
    """Append a function_call item to the chat `messages`: a tool call of the assistant message before it, or of a
    new one."""
    for field in ("call_id", "name", "arguments"):
        if getattr(item, field) is None:
            raise APIError(400, f"{where}.{field}: Field required")
    try:
        arguments = json.loads(item.arguments)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise APIError(400, f"{where}.arguments: not a JSON object")
    call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def call_output(item: Item, where: str, text: str) -> dict[str, Any]:
    """The chat tool message of a function_call_output item whose output is `text`."""
    if item.call_id is None:
        raise APIError(400, f"{where}.call_id: Field required")
    return {"role": "tool", "tool_call_id": item.call_id, "content": text}
