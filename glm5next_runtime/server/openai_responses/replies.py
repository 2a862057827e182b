"""Responses of OpenAI's Responses API: the response object and its stream of typed events.

The output is a reasoning item (when the prompt opened a think block and the reply reasons: its reasoning_text
content, as llama-server and gpt-oss give it) and then a message item (one output_text part), each present when it
has text (llama-server's rule), and with tools a function_call item per call ({"type": "function_call", "id":
"fc_...", "call_id": "call_...", "name", "arguments": JSON text, "status": "completed"}) where the reply makes it
(../reply_parts.py). A generation that ended at the token limit or the context is `incomplete`
(incomplete_details.reason max_output_tokens; its last item too, unless a call: a call's markup closed), as OpenAI
reports it (llama-server says completed). usage: input_tokens (input_tokens_details.cached_tokens: resumed from the
slot's prompt cache), output_tokens, total_tokens.

A stream: response.created and response.in_progress (the response without output), then per item
response.output_item.added, response.content_part.added, its deltas (response.reasoning_text.delta or
response.output_text.delta), response.reasoning_text.done / response.output_text.done, response.content_part.done,
response.output_item.done; per call response.output_item.added, response.function_call_arguments.delta (the whole
arguments at once), response.function_call_arguments.done and response.output_item.done; and last
response.completed (or response.incomplete) with the whole response. Every event is named by its type and numbered
(sequence_number); no [DONE]. A stream cut short ends with an `error` event.
"""
from __future__ import annotations

import uuid
from typing import Any

from ...generate import GenerationResult, PromptProgress
from ..errors import APIError
from ..reply_parts import Change, Part, Parts, whole_parts
from ..replies import Reply, TimingsSoFar, timings, typed_sse
from ..slot_tasks import SlotTask
from ..tool_replies import ToolCalls

PART_TYPES = {"reasoning": "reasoning_text", "text": "output_text"}
ID_PREFIXES = {"reasoning": "rs", "text": "msg", "tool_call": "fc"}


class ResponsesReply(Reply):
    """POST /v1/responses. reasoning: the prompt opened a think block; echo: the request's settings the response
    object repeats (instructions, max_output_tokens, temperature, top_p, reasoning, tools, tool_choice,
    parallel_tool_calls); tools: the reply is read for calls (None: the request has no tools)."""

    stream_end = None

    def __init__(self, model_name: str, reasoning: bool, echo: dict[str, Any], tools: ToolCalls | None = None,
                 timings_per_token: bool = False):
        super().__init__(model_name)
        self._timings_per_token = timings_per_token
        self._so_far: TimingsSoFar | None = None
        self.id = f"resp_{uuid.uuid4().hex}"
        self._reasoning = reasoning
        self._tools = tools
        self._parts = Parts(reasoning, tools)
        self._echo = echo
        self._sequence = 0

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        status = final_status(result)
        parts = whole_parts(result.text, self._reasoning, self._tools)
        return self._response(status, [self._item(p, p.text, item_status(p, parts, status)) for p in parts], result)

    def event(self, chunk: dict[str, Any]) -> str:
        return typed_sse(chunk)

    def error_event(self, error: APIError) -> str:
        return typed_sse(self._event("error", code=error.type, message=error.message, param=None))

    def start(self) -> list[dict[str, Any]]:
        response = self._response("in_progress", [], None)
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def bind(self, task: SlotTask) -> None:
        super().bind(task)
        self._so_far = TimingsSoFar(task.stream)

    def piece(self, text: str) -> list[dict[str, Any]]:
        events = [e for change in self._parts.feed(text) for e in self._events(change, "completed")]
        if self._timings_per_token and self._so_far is not None:  # llama-server's: on the text deltas
            for e in events:
                if e["type"].endswith(".delta"):
                    e["timings"] = self._so_far.now()
        return events

    def progress(self, progress: PromptProgress) -> list[dict[str, Any]]:
        return [self._event("response.in_progress", response=self._response("in_progress", [], None),
                            prompt_progress=progress._asdict())]

    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        status = final_status(result)
        events = [e for change in self._parts.close() for e in self._events(change, status)]
        parts = self._parts.done
        output = [self._item(p, p.text, item_status(p, parts, status)) for p in parts]
        return events + [self._event(f"response.{status}", response=self._response(status, output, result),
                                     timings=timings(result.metrics))]

    def _events(self, change: Change, status: str) -> list[dict[str, Any]]:
        """The events of one change of the output's parts; a part closed now gets `status`."""
        part = change.part
        at = {"item_id": item_id(part), "output_index": part.index}
        if part.kind == "tool_call":
            return self._call_events(change, at)
        delta_type = f"response.{PART_TYPES[part.kind]}"
        logprobs = {"logprobs": []} if part.kind == "text" else {}  # output_text's (none asked for)
        if change.what == "start":
            return [self._event("response.output_item.added", output_index=part.index,
                                item=self._item(part, None, "in_progress")),
                    self._event("response.content_part.added", **at, content_index=0, part=content(part, ""))]
        if change.what == "delta":
            return [self._event(f"{delta_type}.delta", **at, content_index=0, delta=change.text, **logprobs)]
        return [self._event(f"{delta_type}.done", **at, content_index=0, text=part.text, **logprobs),
                self._event("response.content_part.done", **at, content_index=0, part=content(part, part.text)),
                self._event("response.output_item.done", output_index=part.index,
                            item=self._item(part, part.text, status))]

    def _call_events(self, change: Change, at: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one change of a function_call item (its arguments come as one delta)."""
        part = change.part
        if change.what == "start":
            return [self._event("response.output_item.added", output_index=part.index,
                                item=self._item(part, "", "in_progress"))]
        if change.what == "delta":
            return [self._event("response.function_call_arguments.delta", **at, delta=change.text)]
        return [self._event("response.function_call_arguments.done", **at, arguments=part.text),
                self._event("response.output_item.done", output_index=part.index,
                            item=self._item(part, part.text, "completed"))]

    def _event(self, type: str, **fields: Any) -> dict[str, Any]:
        """A stream event, numbered."""
        self._sequence += 1
        return {"type": type, "sequence_number": self._sequence - 1, **fields}

    def _item(self, part: Part, text: str | None, status: str) -> dict[str, Any]:
        """The output item of `part`, holding `text` (None: no content yet; a call's: its arguments)."""
        if part.kind == "tool_call":
            return {"id": item_id(part), "type": "function_call", "status": status, "call_id": f"call_{part.id}",
                    "name": part.call.name, "arguments": text}
        parts = [] if text is None else [content(part, text)]
        if part.kind == "reasoning":
            return {"id": item_id(part), "type": "reasoning", "status": status, "summary": [], "content": parts}
        return {"id": item_id(part), "type": "message", "status": status, "role": "assistant", "content": parts}

    def _response(self, status: str, output: list[dict[str, Any]], result: GenerationResult | None) -> dict[str, Any]:
        """The response object: in progress (no result), or done with `result`'s usage."""
        usage = None
        if result is not None:
            m = result.metrics
            usage = {"input_tokens": m["n_prompt_tokens"],
                     "input_tokens_details": {"cached_tokens": m["n_cached_tokens"]},
                     "output_tokens": m["n_generated"], "total_tokens": m["n_prompt_tokens"] + m["n_generated"]}
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "error": None, "incomplete_details": incomplete,
                "model": self.model, "output": output, "previous_response_id": None, "store": False,
                "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "parallel_tool_calls": True,
                "usage": usage,
                **self._echo}


def content(part: Part, text: str) -> dict[str, Any]:
    """The content part of an output item."""
    if part.kind == "reasoning":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def final_status(result: GenerationResult) -> str:
    """completed, or incomplete when the generation ended at the token limit or the context."""
    return "incomplete" if result.finish_reason == "length" else "completed"


def item_id(part: Part) -> str:
    """The id of `part`'s output item."""
    return f"{ID_PREFIXES[part.kind]}_{part.id}"


def item_status(part: Part, parts: list[Part], status: str) -> str:
    """An item's status: the last one's is the response's, those before it (and calls) were completed."""
    return status if part is parts[-1] and part.kind != "tool_call" else "completed"
