"""Request bodies of llama-server's native endpoints (routes.py), with the conventions of ../schemas.py: strict types,
ranges the engine takes, unknown fields ignored."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from ..schemas import STRICT, GenerationRequest

TokenId = Annotated[int, Field(ge=0)]
# llama-server's prompt shapes: text, token ids, or both mixed in one list (NativeCompletionRequest.prompts: a list
# of prompts)
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
    prompt: MixedPrompt | ObjectPrompt | list[TokenId | str | list[TokenId | str] | ObjectPrompt] = Field(
        description="text, token ids, a list mixing both, or {\"prompt_string\": text}; a list of such prompts "
        "(one without token ids at its top) is several prompts")
    return_tokens: bool = Field(False, description="the generated ids in `tokens`")

    def prompts(self) -> list[MixedPrompt]:
        """The prompts as text or ids (an object's prompt_string), as llama-server's tokenize_input_prompts reads
        them: a list with a token id at its top is one prompt (ids and texts mixed), any other list one prompt per
        item. Raises ValueError for media (a text-only model), a list nested in a prompt, or no prompt."""
        one = isinstance(self.prompt, (str, ObjectPrompt)) or any(isinstance(p, int) for p in self.prompt)
        items = [self.prompt] if one else list(self.prompt)
        if not items:
            raise ValueError("prompt: must not be empty")
        return [_one_prompt(p, "prompt" if one else f"prompt.{i}") for i, p in enumerate(items)]


def _one_prompt(prompt: Any, where: str) -> MixedPrompt:
    if isinstance(prompt, ObjectPrompt):
        if prompt.multimodal_data:
            raise ValueError(f"{where}.multimodal_data: not supported: the model takes text only")
        return prompt.prompt_string
    if isinstance(prompt, list) and not all(isinstance(p, (int, str)) for p in prompt):
        raise ValueError(f"{where}: a prompt is text, token ids or both mixed; a list with token ids at its top is "
                         "one prompt")
    return prompt
