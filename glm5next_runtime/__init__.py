"""glm5next runtime: the native ggml engine for GLM-5.3-Flash, exposed to Python.

The compiled part lives in ``glm5next_runtime._core`` and links against the
ggml shared libraries shipped by llama-cpp-python (the same files, not copies).
"""

from importlib.metadata import version as _dist_version

from . import _core
from .model import Model
from .tokenizer import Tokenizer

# Single source of truth is pyproject.toml's [project].version.
__version__ = _dist_version("glm5next")

__all__ = ["Model", "Tokenizer", "_core", "__version__"]
