"""Keep freed memory in the process (glibc malloc), so that every training step reuses the last step's pages.

By default glibc serves large tensors with fresh mmap()s and unmaps them when freed; every step then page-faults
its whole working set again. On a VM with lazily backed memory that made steps 3-30x slower and erratic
(measured: 3.6 s vs 5-280 s for the same step). mallopt(M_MMAP_MAX, 0) serves everything from the heap and
M_TRIM_THRESHOLD = huge never hands it back (the same as MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=... in the
environment, but settable after start-up).
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Apply the settings above; False where the C library is not glibc (nothing changes there)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1))
