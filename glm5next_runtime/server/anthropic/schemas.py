"""Request bodies of Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) and the chat request
each one is (llama-server's server_chat_convert_anthropic_to_oai, read, not copied): `system` (a string or text
blocks, joined) becomes a system message, each message's text blocks are joined into its content and its thinking
blocks into its reasoning_content, `stop_sequences` is `stop`, and `max_tokens`, `temperature`, `top_p`, `top_k`,
`stream` and llama-server's `chat_template_kwargs` pass as they are. `thinking` turns the template's think block on
or off (enable_thinking); its budget_tokens is not enforced (no think budget yet: max_tokens bounds the reply).
Tool use (`tools`, `tool_choice`, tool_use and tool_result blocks) is tools.py's. A user message's
tool_result blocks become tool messages and its text blocks user messages, in the blocks' order (llama-server puts
the text first).

Strict types and unknown fields ignored, as ../schemas.py. No messages is a prompt of the template's generation prompt
alone, as llama-server answers it. Stricter than llama-server where it guesses: max_tokens is required
(llama-server: 4096 when absent), and a block this server cannot read (image, document, ...) is a 400 naming it
rather than dropped (llama-server: a 500, "image input is not supported" without a projector).

Claude Code starts its system prompt with "x-anthropic-billing-header: cc_version=2.1.138.fbe; cc_entrypoint=cli;
cch=a39d0;": the cch stamp and the fingerprint after the version (3 hex digits) change on every request. As
llama-server writes the stamp as fffff, both are written as f's, so that the prompt cache gets past the header (it
opens the prompt: a change there would leave nothing of the cache); llama-server keeps the fingerprint.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from .blocks import Block
from .tools import Tool, ToolChoice, tool_call, tool_fields, tool_message
from ..errors import APIError
from ..schemas import STRICT

BILLING_HEADER = re.compile(r"\Ax-anthropic-billing-header:[^\n]*")  # its line
BILLING_STAMPS = (re.compile(r"(cch=)([^;]{5});"), re.compile(r"(cc_version=\d+\.\d+\.\d+\.)([0-9a-fA-F]{3});"))


class AnthropicMessage(BaseModel):
    model_config = STRICT
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Thinking(BaseModel):
    """Extended thinking: enabled (or adaptive) opens the template's think block, disabled closes it."""
    model_config = STRICT
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0, description="not enforced: max_tokens bounds the whole reply")


class CountTokensRequest(BaseModel):
    """POST /v1/messages/count_tokens: the conversation of a Messages request."""
    model_config = STRICT
    model: str | None = Field(None, description="any name: echoed in the response (llama-server with one model)")
    messages: list[AnthropicMessage]
    system: str | list[Block] | None = None
    thinking: Thinking | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(None, description="llama-server's: extra template "
                                                        "variables, e.g. {\"enable_thinking\": false}")
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None

    def chat_fields(self) -> dict[str, Any]:
        """The fields of the chat request (schemas.ChatRequest) this conversation is. Raises APIError (400) naming a
        block or tool this server cannot read."""
        messages = [] if self.system is None else [{"role": "system", "content": system_text(self.system)}]
        messages += [m for i, message in enumerate(self.messages) for m in chat_messages(message, f"messages.{i}")]
        variables = {} if self.thinking is None else {"enable_thinking": self.thinking.type != "disabled"}
        variables |= self.chat_template_kwargs or {}
        return {"messages": messages} | tool_fields(self.tools, self.tool_choice) | (
            {"chat_template_kwargs": variables} if variables else {})


class MessagesRequest(CountTokensRequest):
    """POST /v1/messages."""
    max_tokens: int = Field(ge=1, description="the most tokens to generate")
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    def chat_fields(self) -> dict[str, Any]:
        sampling = {name: getattr(self, name) for name in ("temperature", "top_p", "top_k")
                    if getattr(self, name) is not None}  # absent: the server's defaults
        return super().chat_fields() | sampling | {"max_tokens": self.max_tokens, "stop": self.stop_sequences,
                                                   "stream": self.stream}


def system_text(system: str | list[Block]) -> str:
    """The system prompt: a string, or its text blocks joined (other blocks are a 400), billing stamp blanked."""
    if isinstance(system, str):
        return blank_billing_stamp(system)
    return "".join(blank_billing_stamp(block_text(b, f"system.{i}", ("text",))) for i, b in enumerate(system))


def chat_messages(message: AnthropicMessage, where: str) -> list[dict[str, Any]]:
    """A message as chat completions has it: an assistant's text blocks joined into content, its thinking blocks
    into reasoning_content, its tool_use blocks its tool_calls; a user's tool_result blocks tool messages and its
    text blocks (those between them joined) user messages, in order."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "assistant":
        return [assistant_message(message.content, where)]
    out: list[dict[str, Any]] = []
    for i, block in enumerate(message.content):
        at = f"{where}.content.{i}"
        if block.type == "tool_result":
            out.append(tool_message(block, at, result_text(block, at)))
        elif out and out[-1]["role"] == "user":
            out[-1]["content"] += block_text(block, at, ("text",))
        else:
            out.append({"role": "user", "content": block_text(block, at, ("text",))})
    return out or [{"role": "user", "content": ""}]


def assistant_message(blocks: list[Block], where: str) -> dict[str, Any]:
    """An assistant's message of blocks (see chat_messages)."""
    texts, calls = {"text": "", "thinking": ""}, []
    for i, block in enumerate(blocks):
        at = f"{where}.content.{i}"
        if block.type == "tool_use":
            calls.append(tool_call(block, at))
        else:
            text = block_text(block, at, ("text", "thinking"))
            texts[block.type] += text
    out = {"role": "assistant", "content": texts["text"]}
    return out | ({"reasoning_content": texts["thinking"]} if texts["thinking"] else {}) | (
        {"tool_calls": calls} if calls else {})


def result_text(block: Block, where: str) -> str:
    """The content of a tool_result block: a string, or its text blocks joined."""
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    return "".join(block_text(b, f"{where}.content.{i}", ("text",)) for i, b in enumerate(block.content))


TOOL_BLOCKS = {"tool_use": "an assistant's", "tool_result": "a user's"}


def block_text(block: Block, where: str, kinds: tuple[str, ...]) -> str:
    """The text of a block of one of `kinds`; raises APIError (400) naming the block otherwise."""
    if block.type not in kinds:
        why = (f"only {TOOL_BLOCKS[block.type]} message has them" if block.type in TOOL_BLOCKS
               else f"this server reads {' and '.join(kinds)} blocks only (a text-only model)")
        raise APIError(400, f"{where}: {block.type} block: {why}")
    text = getattr(block, block.type)
    if text is None:
        raise APIError(400, f"{where}.{block.type}: Field required")
    return text


def blank_billing_stamp(text: str) -> str:
    """Claude Code's billing header with its per-request cch stamp and version fingerprint written as f's (see the
    module docstring); any other text as it is."""
    header = BILLING_HEADER.match(text)
    if header is None:
        return text
    line = header.group(0)
    for stamp in BILLING_STAMPS:
        line = stamp.sub(lambda m: m.group(1) + "f" * len(m.group(2)) + ";", line, count=1)
    return line + text[header.end():]
