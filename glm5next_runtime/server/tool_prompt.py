"""A chat request's tools in the prompt (OpenAI's `tools`, llama-server's --jinja tool calling): the messages and
template variables that give the model its functions and the calls and results so far.

A template that renders `tools` itself (GLM's own do: the checkpoint's template) gets them as the variable `tools`
and the history as OpenAI sends it, with each call's `arguments` (a JSON string on the wire) as the object GLM's
templates iterate over. A template that does not (the bundled demo model's, the built-in ones) gets GLM's tool
description (../tool_calls.py, tools_preamble) in the system message, each earlier call as GLM's markup in the
assistant's content, and each tool result as an observation turn wrapped in <tool_response>, as GLM's templates
render them.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..tool_calls import call_markup, tools_preamble
from .errors import APIError


def renders_tools(template_source: str) -> bool:
    """Whether a chat template uses the `tools` variable (then it describes the tools itself)."""
    return "tools" in template_source


def tool_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                  native: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(messages, template variables) for a chat with `tools` (OpenAI's tools list); native: the template renders
    tools itself (renders_tools). Raises APIError 400 naming the message whose tool call's arguments are not a
    JSON object."""
    out = [_with_parsed_arguments(dict(m), i) for i, m in enumerate(messages)]
    if native:
        return out, {"tools": list(tools)}
    flat: list[dict[str, Any]] = []
    for m in out:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "".join(call_markup(c["function"]["name"], c["function"]["arguments"]) for c in m.pop("tool_calls"))
            m["content"] = (m.get("content") or "") + calls
        elif m["role"] == "tool":
            m = {"role": "observation", "content": f"<tool_response>{m.get('content') or ''}</tool_response>"}
        flat.append(m)
    preamble = tools_preamble(tools)
    if flat and flat[0]["role"] == "system":
        flat[0] = flat[0] | {"content": f"{flat[0].get('content') or ''}\n\n{preamble}".lstrip()}
    else:
        flat.insert(0, {"role": "system", "content": preamble})
    return flat, {}


def _with_parsed_arguments(message: dict[str, Any], index: int) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    parsed = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise APIError(400, f"messages[{index}].tool_calls[{j}]: expected {{\"type\": \"function\", "
                                "\"function\": {\"name\": ..., \"arguments\": ...}}")
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:
                args = json.loads(args or "{}")
            except ValueError:
                args = None
        if not isinstance(args, Mapping):
            raise APIError(400, f"messages[{index}].tool_calls[{j}].function.arguments: not a JSON object")
        parsed.append({**call, "function": {**fn, "arguments": dict(args)}})
    return message | {"tool_calls": parsed}
