"""Request bodies of llama-server's native endpoints (native.py), with the conventions of schemas.py: strict types,
ranges the engine takes, unknown fields ignored."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from .schemas import STRICT, GenerationRequest

TokenId = Annotated[int, Field(ge=0)]
# llama-server's prompt shapes: text, token ids, or both mixed in one list; a list of such lists (or of several
# texts) is several prompts
MixedPrompt = str | list[TokenId | str]


class TokenizeRequest(BaseModel):
    """POST /tokenize. No content: no tokens (llama-server)."""
    model_config = STRICT
    content: MixedPrompt | None = None
    add_special: bool = Field(False, description="add BOS / EOS when the file asks for them")
    parse_special: bool = Field(True, description="control tokens written in the text become their ids")
    with_pieces: bool = Field(False, description="each token as {id, piece} (piece: text, or its bytes when they "
                              "are not valid UTF-8 on their own)")


class DetokenizeRequest(BaseModel):
    """POST /detokenize."""
    model_config = STRICT
    tokens: list[TokenId] = []


class ObjectPrompt(BaseModel):
    """llama-server's prompt object: the text in prompt_string, media for its markers in multimodal_data."""
    model_config = STRICT
    prompt_string: str
    multimodal_data: list[str] = []


class NativeCompletionRequest(GenerationRequest):
    """POST /completion: llama-server's native completion, with its fields besides the shared ones (the token limit
    is n_predict, -1 for none)."""
    prompt: MixedPrompt | ObjectPrompt | list[list[Any] | str] = Field(
        description="one prompt: text, token ids, a list mixing both, or {\"prompt_string\": text} (the last shape "
        "is several prompts: refused)")
    return_tokens: bool = Field(False, description="the generated ids in `tokens`")
    timings_per_token: bool = Field(False, description="stream chunks carry the generation's timings so far")

    def several_prompts(self) -> bool:
        """Whether `prompt` is llama-server's several-prompts shape (a list of lists, or of more than one text)."""
        if isinstance(self.prompt, (str, ObjectPrompt)):
            return False
        return any(isinstance(p, list) for p in self.prompt) or (
            len(self.prompt) > 1 and all(isinstance(p, str) for p in self.prompt))

    def one_prompt(self) -> MixedPrompt:
        """The prompt as text or ids (an object's prompt_string). Raises ValueError for media (a text-only model)."""
        if isinstance(self.prompt, ObjectPrompt):
            if self.prompt.multimodal_data:
                raise ValueError("prompt.multimodal_data: not supported: the model takes text only")
            return self.prompt.prompt_string
        return self.prompt
