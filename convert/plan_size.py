"""What a conversion will write, known before its first byte: the output's size by tensor type, and whether the
output's filesystem has room for it (issue 50: a run that fails at 95% of hundreds of GB has cost hours)."""
from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from gguf import GGMLQuantizationType as QT

from . import qtypes
from .checkpoint import ConversionError

# Besides the tensors' bytes: the header and metadata but the tokenizer (bounded by its files' sizes, whose JSON
# spells more than GGUF's arrays store) and each tensor's alignment padding (gguf's default alignment, 32).
HEADER_BOUND = 1 << 20
ALIGNMENT = 32


def sizes_by_type(shapes: Sequence[Sequence[int]], types: Sequence[QT]) -> dict[str, int]:
    """Bytes of tensor data per type name (e.g. {"Q8_0": ..., "F32": ...}), largest first."""
    out: dict[str, int] = {}
    for shape, qt in zip(shapes, types):
        out[qt.name] = out.get(qt.name, 0) + qtypes.nbytes(shape, qt)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def describe(sizes: dict[str, int]) -> str:
    """'12.34 GiB: Q8_0 12.00 GiB, F32 0.34 GiB' (the log line before writing)."""
    gib = 2**30
    return f"{sum(sizes.values()) / gib:.2f} GiB: " + ", ".join(f"{k} {v / gib:.2f} GiB" for k, v in sizes.items())


def output_bound(tensor_bytes: int, n_tensors: int, tokenizer_files: Sequence[Path]) -> int:
    """An upper bound of the output's size: the tensors' bytes, their padding, the header and the tokenizer."""
    return tensor_bytes + n_tensors * ALIGNMENT + HEADER_BOUND + sum(f.stat().st_size for f in tokenizer_files)


def check_room(out: Path, need: int) -> None:
    """Refuse to start when the output's filesystem (that of its nearest existing directory) has less free space
    than `need` bytes (output_bound). Raises ConversionError naming both figures and the path."""
    directory = out.absolute().parent
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    try:
        free = shutil.disk_usage(directory).free
    except OSError as e:
        raise ConversionError(f"--outfile {out}: cannot read the free space of {directory} ({e.strerror})") from e
    if need > free:
        raise ConversionError(f"--outfile {out}: the output needs {need / 2**30:.2f} GiB ({need} bytes) but "
                              f"{directory} has {free / 2**30:.2f} GiB free ({free} bytes); nothing was written "
                              "(choose another --outfile, or a smaller --outtype)")
