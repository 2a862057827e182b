"""The input items of OpenAI's Responses API, as requests carry them (schemas.py reads
messages of them, tools.py their function_call and function_call_output items)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from ..schemas import STRICT


class Part(BaseModel):
    """A content part of an input item (input_text, output_text, reasoning_text, ...)."""
    model_config = STRICT
    type: str
    text: str | None = None


class Item(BaseModel):
    """An input item: a message (the default type), a reasoning item, a function_call (call_id, name, arguments)
    or a function_call_output (call_id, output)."""
    model_config = STRICT
    type: str = "message"
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[Part] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[Part] | None = None
