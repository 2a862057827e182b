"""Response bodies of /v1/completions and /v1/chat/completions (OpenAI's shapes, llama-server's extras). A response
carries usage and llama-server's `timings`; a stream carries the usage only when asked (stream_options.include_usage),
as OpenAI does: in a last chunk with `choices: []`, and the timings on its last chunk, as llama-server does (the
finish chunk, or that usage chunk). Token log-probabilities, when asked for, are in each choice's `logprobs`
(../logprobs.py): a stream chunk carries those of the tokens consumed since the last chunk that carried some, the
finish chunk the rest."""
from __future__ import annotations

from typing import Any

from ...chat import ReasoningSplitter, split_reasoning
from ...generate import GenerationResult, PromptProgress, TokenLogprob
from ..logprobs import TokenPieces, chat_logprobs, completion_logprobs
from ..replies import Reply
from ..tool_replies import StreamedCalls, ToolCalls, finish_reason, whole_message


class CompletionReply(Reply):
    """POST /v1/completions. pieces: how tokens are shown in logprobs."""

    id_prefix = "cmpl"
    carries_verbose = True
    object = chunk_object = "text_completion"

    def __init__(self, model_name: str, pieces: TokenPieces, include_usage: bool = False):
        super().__init__(model_name, include_usage)
        self._pieces = pieces
        self._text_offset = 0  # characters of the tokens whose logprobs were sent

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        return self._whole(self._choice(result.text, result.finish_reason, result.logprobs), result)

    def piece(self, text: str) -> list[dict[str, Any]]:
        return [self._body(self.chunk_object, self._choice(text, None, self._new_logprobs()))]

    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        return [self._body(self.chunk_object, self._choice("", result.finish_reason, self._new_logprobs()), result)]

    def progress(self, progress: PromptProgress) -> list[dict[str, Any]]:
        chunk = self._body(self.chunk_object, {"text": "", "logprobs": None, "finish_reason": None})
        return [chunk | {"prompt_progress": progress._asdict()}]

    def _choice(self, text: str, finish_reason: str | None,
                entries: list[TokenLogprob] | None) -> dict[str, Any]:
        logprobs = None
        if entries is not None:
            logprobs = completion_logprobs(entries, self._pieces, self._text_offset)
            self._text_offset += sum(map(len, logprobs["tokens"]))
        return {"text": text, "logprobs": logprobs, "finish_reason": finish_reason}


class ChatReply(Reply):
    """POST /v1/chat/completions. With `reasoning` (the prompt opened a think block) the reply's text up to
    </think> is reasoning_content and the rest content; a stream sends the reasoning deltas, then the content
    deltas. pieces: how tokens are shown in logprobs."""

    id_prefix = "chatcmpl"
    carries_verbose = True
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def __init__(self, model_name: str, pieces: TokenPieces, reasoning: bool, include_usage: bool = False,
                 tools: ToolCalls | None = None):
        """tools: read the reply's content for tool calls (../tool_replies.py); None: the request has no tools."""
        super().__init__(model_name, include_usage)
        self._pieces = pieces
        self._splitter = ReasoningSplitter() if reasoning else None
        self._tools = tools
        self._calls = StreamedCalls(tools) if tools is not None else None

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": result.text}
        if self._splitter is not None:
            message["reasoning_content"], message["content"] = split_reasoning(result.text)
        calls: list[dict[str, Any]] = []
        if self._tools is not None:
            message["content"], calls = whole_message(message["content"], self._tools)
            if calls:
                message["tool_calls"] = calls
        return self._whole({"message": message, "logprobs": self._logprobs(result.logprobs),
                            "finish_reason": finish_reason(result.finish_reason, len(calls))}, result)

    def start(self) -> list[dict[str, Any]]:
        return [self._delta({"role": "assistant", "content": None})]

    def progress(self, progress: PromptProgress) -> list[dict[str, Any]]:
        # llama-server's progress chunk: the opening delta again, with the progress
        return [self._delta({"role": "assistant", "content": None}) | {"prompt_progress": progress._asdict()}]

    def piece(self, text: str) -> list[dict[str, Any]]:
        if self._splitter is None and self._calls is None:
            return self._with_logprobs([self._delta({"content": text})])
        # text held back by the splitter makes no chunk: its tokens' logprobs go with the next one
        parts = self._splitter.feed(text) if self._splitter is not None else ("", text)
        return self._with_logprobs(self._split_deltas(*parts))

    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        tail = self._split_deltas(*self._splitter.flush()) if self._splitter is not None else []
        if self._calls is not None:
            rest, calls = self._calls.flush()
            tail += ([self._delta({"content": rest})] if rest else []) + ([self._delta({"tool_calls": calls})]
                                                                           if calls else [])
        n_calls = self._calls.n_calls if self._calls is not None else 0
        return tail + self._with_logprobs([self._delta({}, finish_reason(result.finish_reason, n_calls), result)])

    def _with_logprobs(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`chunks`, the last one carrying the logprobs of the tokens consumed since the last chunk that did."""
        if chunks and self._feed is not None:
            chunks[-1]["choices"][0]["logprobs"] = self._logprobs(self._new_logprobs())
        return chunks

    def _logprobs(self, entries: list[TokenLogprob] | None) -> dict[str, Any] | None:
        return None if entries is None else chat_logprobs(entries, self._pieces)

    def _split_deltas(self, reasoning: str, content: str) -> list[dict[str, Any]]:
        out = [self._delta({"reasoning_content": reasoning})] if reasoning else []
        calls: list[dict[str, Any]] = []
        if self._calls is not None and content:
            content, calls = self._calls.feed(content)
        out += [self._delta({"content": content})] if content else []
        return out + ([self._delta({"tool_calls": calls})] if calls else [])

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None,
               result: GenerationResult | None = None) -> dict[str, Any]:
        return self._body(self.chunk_object, {"delta": delta, "logprobs": None, "finish_reason": finish_reason},
                          result)
