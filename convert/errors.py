"""The converter's one error type."""
from __future__ import annotations


class ConversionError(Exception):
    """Bad input to the converter: the message names the file, the tensor or the key at fault."""
