"""The plan's tensors encoded to the bytes ggml stores, on worker threads ahead of the writer (issue 50:
`glm5next-convert -t N`). The pieces are the plan's tensors, a stacked experts tensor's being its experts; they are
read, dequantized and quantized by N workers and handed to the writer in the file's order, so the output is the
same bytes whatever N. Memory: at most 2N pieces in flight besides the one being written (an expert of
GLM-5.3-Flash is 2048 x 4096 floats, 32 MiB, as read; the embedding and output, 2.3 GiB each, are the largest)."""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from gguf import GGMLQuantizationType as QT

from . import qtypes
from .checkpoint import Checkpoint
from .tensors import PlannedTensor, materialize

Piece = tuple[PlannedTensor, QT, str | None]  # a tensor, its type, and which expert (None: the whole tensor)


def pieces_of(t: PlannedTensor) -> int:
    """How many pieces tensor `t` is written as (its experts, or itself)."""
    return len(t.sources) if t.kind == "stack" else 1


class Encoder:
    """Encodes the pieces of `plan` (with `types`) in order on `threads` workers (1: in the caller's thread, one piece
    at a time, nothing ahead). Use as a context manager; next() returns the next piece's bytes."""

    def __init__(self, ckpt: Checkpoint, plan: Sequence[PlannedTensor], types: Sequence[QT], threads: int):
        self._ckpt = ckpt
        self._pieces: Iterator[Piece] = ((t, qt, name) for t, qt in zip(plan, types)
                                         for name in ([n for n, _ in t.sources] if t.kind == "stack" else [None]))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="encode") if threads > 1 else None
        self._ahead: deque[Future] = deque()
        self._window = 2 * threads

    def __enter__(self) -> Encoder:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:  # on an error or interrupt: what has not started is dropped
            self._pool.shutdown(wait=True, cancel_futures=True)

    def next(self) -> np.ndarray:
        if self._pool is None:
            return self._encode(next(self._pieces))
        while len(self._ahead) < self._window and (piece := next(self._pieces, None)) is not None:
            self._ahead.append(self._pool.submit(self._encode, piece))
        return self._ahead.popleft().result()

    def _encode(self, piece: Piece) -> np.ndarray:
        t, qt, name = piece
        return qtypes.encode(self._ckpt.read(name) if name is not None else materialize(self._ckpt, t), qt)
