"""glm5next_convert: GLM-5.3-Flash Hugging Face checkpoints -> GGUF (docs/gguf.md).

    from glm5next_convert import convert
    convert("GLM-5.3-Flash/", "glm5next-q8_0.gguf", outtype="q8_0", mtp_type="q4_0")

The command line is `glm5next-convert` (glm5next_convert.cli).
"""
from .errors import ConversionError
from .converter import convert

__all__ = ["ConversionError", "convert"]
