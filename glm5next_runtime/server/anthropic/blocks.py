"""The content block of Anthropic's Messages API, as requests carry it (schemas.py reads messages
of them, tools.py their tool_use and tool_result blocks)."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..schemas import STRICT


class Block(BaseModel):
    """A content block. Its type says which fields it needs: text's `text`, thinking's `thinking`, tool_use's
    `id`, `name` and `input`, tool_result's `tool_use_id` and `content` (a string or text blocks; `is_error`)."""
    model_config = STRICT
    type: str
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[Block] | None = None
    is_error: bool = False
