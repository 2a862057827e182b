"""Work off the event loop: the server's routes run parsing, templates, tokenizing and waits in worker threads."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread

T = TypeVar("T")


async def in_thread(func: Callable[..., T], *args: Any) -> T:
    """func(*args) in a worker thread: the event loop stays free."""
    return await anyio.to_thread.run_sync(partial(func, *args))
