"""The request body of OpenAI's completions, POST /v1/completions, with the conventions of ../schemas.py."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from ..schemas import GenerationRequest, null_only

TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(GenerationRequest):
    """POST /v1/completions: a prompt as text or token ids, or several (OpenAI's lists of texts or of id lists)."""
    prompt: str | TokenIds | Annotated[list[str], Field(min_length=1)] | Annotated[list[TokenIds], Field(min_length=1)]
    # OpenAI's completions have no such field (its count is `logprobs`): a 400 rather than a count ignored
    top_logprobs: Annotated[Any, AfterValidator(null_only("a chat field: here the count is `logprobs`"))] = None

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each text or token ids."""
        if isinstance(self.prompt, str) or isinstance(self.prompt[0], int):
            return [self.prompt]
        return list(self.prompt)
