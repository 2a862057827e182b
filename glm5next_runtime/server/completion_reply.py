"""The response of llama-server's native completion, POST /completion (not OpenAI's shape): one object with the
text, its tokens, why it stopped and the request's settings, or, streamed, one {"content", "tokens", "stop": false}
chunk per text piece and a last "stop": true chunk with the summary (its tokens empty: they were streamed). A chunk
carries the ids of the tokens its text came with; text that comes with none (the tail of the text, held back while
it could still be a stop string or part of a character) goes with the next chunk, or the last one. A native stream
has no [DONE]."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..generate import GenerationResult, PromptProgress
from .logprobs import TokenPieces, token_probs
from .replies import Reply, TimingsSoFar, predicted_side, prompt_timings, stopping_word, timings
from .slot_tasks import SlotTask


class NativeCompletionReply(Reply):
    """POST /completion. prompt: the prompt's tokens as text (llama-server's `prompt`); n_ctx: the slot's context
    (a generation that filled it is `truncated`); stops: the request's stop strings; render: token ids -> text as
    the generation shows them; return_tokens: the generated ids in a whole response's `tokens`;
    timings_per_token: every stream chunk carries the generation's timings so far; pieces: how tokens are shown in
    `completion_probabilities` (n_probs: a whole response's has every token's, a chunk's its tokens')."""

    stream_end = None

    def __init__(self, model_name: str, prompt: str, n_ctx: int, stops: Sequence[str],
                 render: Callable[[list[int]], str], return_tokens: bool, timings_per_token: bool,
                 pieces: TokenPieces):
        super().__init__(model_name)
        self._pieces = pieces
        self._prompt = prompt
        self._n_ctx = n_ctx
        self._stops = tuple(stops)
        self._render = render
        self._return_tokens = return_tokens
        self._timings_per_token = timings_per_token
        self._task: SlotTask | None = None
        self._n_sent = 0  # generated tokens already in stream chunks
        self._held = ""  # text that came without a token of its own, for the next chunk
        self._so_far: TimingsSoFar | None = None  # timings_per_token

    def bind(self, task: SlotTask) -> None:
        self._task = task
        self._so_far = TimingsSoFar(task.stream)

    def whole(self, result: GenerationResult) -> dict[str, Any]:
        out = self._summary(result, result.text, list(result.tokens) if self._return_tokens else [])
        if result.logprobs is not None:
            out["completion_probabilities"] = token_probs(result.logprobs, self._pieces)
        return out

    def piece(self, text: str) -> list[dict[str, Any]]:
        task = self._bound()
        tokens = task.stream.tokens
        new, self._n_sent = tokens[self._n_sent:], len(tokens)
        if not new:
            self._held += text
            return []
        text, self._held = self._held + text, ""
        chunk = {"index": 0, "content": text, "tokens": new, "stop": False, "id_slot": task.slot,
                 "tokens_predicted": self._n_sent, "tokens_evaluated": task.n_prompt_tokens}
        if self._timings_per_token:
            chunk["timings"] = self._so_far.now()
        if task.stream.logprobs is not None:
            chunk["completion_probabilities"] = token_probs(task.stream.logprobs[self._n_sent - len(new):self._n_sent],
                                                            self._pieces)
        return [chunk]

    def _finish(self, result: GenerationResult) -> list[dict[str, Any]]:
        return [self._summary(result, self._held, [])]

    def progress(self, progress: PromptProgress) -> list[dict[str, Any]]:
        task = self._bound()
        chunk = {"index": 0, "content": "", "tokens": [], "stop": False, "id_slot": task.slot, "tokens_predicted": 0,
                 "tokens_evaluated": task.n_prompt_tokens, "prompt_progress": progress._asdict()}
        if self._timings_per_token:  # the prompt's side so far (llama-server's: 0 before its first ubatch)
            chunk["timings"] = prompt_timings(progress) | predicted_side(0, 0.0)
        return [chunk]

    def _summary(self, result: GenerationResult, content: str, tokens: list[int]) -> dict[str, Any]:
        task = self._bound()
        m = result.metrics
        n_tokens = m["n_prompt_tokens"] + m["n_generated"]
        word = stopping_word(result, self._stops, self._render)
        stop_type = "limit" if result.finish_reason == "length" else "word" if word else "eos"
        return {
            "index": 0, "content": content, "tokens": tokens, "id_slot": task.slot, "stop": True,
            "model": self.model, "tokens_predicted": m["n_generated"], "tokens_evaluated": m["n_prompt_tokens"],
            "generation_settings": task.params | {"timings_per_token": self._timings_per_token},
            "prompt": self._prompt, "has_new_line": "\n" in result.text,
            "truncated": result.finish_reason == "length" and n_tokens >= self._n_ctx,
            "stop_type": stop_type, "stopping_word": word, "tokens_cached": n_tokens, "timings": timings(m),
        }

    def _bound(self) -> SlotTask:
        assert self._task is not None, "bind() comes before the response"
        return self._task
