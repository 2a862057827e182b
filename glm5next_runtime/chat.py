"""Chat: rendering messages with the file's jinja2 chat template, and splitting the reply into reasoning and
content when the rendered prompt leaves a think block open."""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


class ChatTemplateError(ValueError):
    """The template cannot render these messages (it raised, uses something undefined or forbidden, or failed in
    any other way: a division by zero, a range too large, an include). The message names the template's error and
    never shows a memory address."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


@jinja2.pass_context
def _as_is(_context: Any, value: Any) -> Any:
    return value


class ChatTemplate:
    """A chat template from a GGUF (tokenizer.chat_template), rendered the way transformers renders it: a
    sandbox (templates come with downloaded files), trim_blocks / lstrip_blocks, loop controls, and the
    raise_exception / tojson helpers that hub templates call."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        """source: the jinja2 text. Raises ChatTemplateError when it does not parse."""
        # Nothing is evaluated while compiling: jinja2 folds constant expressions at compile time unless asked not
        # to (optimized=False) and unless output needs the render context (the finalize), and a template's
        # "constant" may be {{ [1]*100000000 }}. Compiling is then cheap; rendering is what needs bounds.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, optimized=False,
                                            finalize=_as_is, extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = _raise_exception
        del env.globals["lipsum"]  # text of any length on request; no chat template needs it
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template does not parse: {e}") from None
        self._specials = dict(bos_token=bos_token, eos_token=eos_token)

    def render(self, messages: Sequence[Mapping[str, Any]], variables: Mapping[str, Any] | None = None,
               add_generation_prompt: bool = True) -> str:
        """The prompt for `messages`, ending with the assistant's header (the template's add_generation_prompt)
        unless add_generation_prompt is False. `variables`: more template variables (e.g. enable_thinking; they
        cannot replace messages or add_generation_prompt). Raises ChatTemplateError when the template fails on
        them."""
        context = {**self._specials, **(variables or {}), "messages": list(messages),
                   "add_generation_prompt": add_generation_prompt}
        try:
            return self._template.render(context)
        except ChatTemplateError:
            raise
        except MemoryError:
            raise  # the caller's to handle: the process may be short of memory
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template failed on these messages: {_public(e)}") from None
        except Exception as e:  # template code is untrusted: any error of it is the template's
            raise ChatTemplateError(f"the chat template failed on these messages: {type(e).__name__}: "
                                    f"{_public(e)}") from None


def _public(error: Exception) -> str:
    """The error's message without memory addresses (a repr such as <built-in method ... at 0x7f...>)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", str(error))


def opens_think_block(prompt: str) -> bool:
    """True when the prompt ends inside a think block (its last <think> has no </think> after it): the reply
    then starts with reasoning."""
    return prompt.rfind(THINK_OPEN) > prompt.rfind(THINK_CLOSE)


class ReasoningSplitter:
    """Streams a reply that starts inside a think block: text before the first </think> is reasoning, the rest
    content. A tail that may still grow into </think> is held back until it is decided, so no piece of the tag
    leaks into either part. The whitespace right after </think> is dropped (as llama-server does): templates
    write "</think>\n" themselves when the reply goes back into the history."""

    def __init__(self) -> None:
        self._pending = ""
        self.in_reasoning = True
        self._content_started = False

    def feed(self, text: str) -> tuple[str, str]:
        """Add a piece of the reply; returns the (reasoning, content) text that became final (either may be "")."""
        if not self.in_reasoning:
            return "", self._content(text)
        self._pending += text
        end = self._pending.find(THINK_CLOSE)
        if end >= 0:
            self.in_reasoning = False
            reasoning, content = self._pending[:end], self._pending[end + len(THINK_CLOSE):]
            self._pending = ""
            return reasoning, self._content(content)
        keep = next((n for n in range(min(len(self._pending), len(THINK_CLOSE) - 1), 0, -1)
                     if THINK_CLOSE.startswith(self._pending[-n:])), 0)
        out, self._pending = self._pending[:len(self._pending) - keep], self._pending[len(self._pending) - keep:]
        return out, ""

    def flush(self) -> tuple[str, str]:
        """At the end of the reply: the held-back tail, reasoning (text is held back only inside the think block;
        an unfinished think block is all reasoning)."""
        out, self._pending = self._pending, ""
        return out, ""

    def _content(self, text: str) -> str:
        if not self._content_started:
            text = text.lstrip()
            self._content_started = bool(text)
        return text


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, content) of a whole reply that starts inside a think block."""
    splitter = ReasoningSplitter()
    r1, c1 = splitter.feed(text)
    r2, c2 = splitter.flush()
    return r1 + r2, c1 + c2
