"""llama-server's assistant prefill: a chat whose last message is the assistant's continues that message. The
template renders the messages before it, with its generation prompt (the assistant's header, a think block's opening
when the template writes one), and the prompt ends with that message's text, so the reply picks up where it stops.
Two assistant messages at the end are refused as llama-server refuses them. continue_final_message (vLLM's field)
asks for this explicitly, or (false) for a new turn after a final assistant message; asking for it explicitly
needs add_generation_prompt false, as llama-server (and vLLM) require."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import APIError


def split_prefill(messages: Sequence[Mapping[str, Any]], continue_final: bool | None,
                  add_generation_prompt: bool = False) -> tuple[list[Mapping[str, Any]], str | None]:
    """(the messages the template renders, the prefill: the text the prompt ends with, None for a new turn).
    messages: as the template sees them (Message.for_template). continue_final: the request's
    continue_final_message (None: continue when the last message is the assistant's). add_generation_prompt: the
    request's. Raises APIError (400) for two assistant messages at the end, continue_final with
    add_generation_prompt, or continue_final without a final assistant message."""
    if continue_final and add_generation_prompt:
        raise APIError(400, "Cannot set both add_generation_prompt and continue_final_message to true.")
    ends_with_assistant = bool(messages) and messages[-1]["role"] == "assistant"
    if not (ends_with_assistant if continue_final is None else continue_final):
        return list(messages), None
    if not ends_with_assistant:
        raise APIError(400, "continue_final_message: the last message is not the assistant's")
    if len(messages) > 1 and messages[-2]["role"] == "assistant":
        raise APIError(400, "Cannot have 2 or more assistant messages at the end of the list.")
    return list(messages[:-1]), messages[-1].get("content") or ""
