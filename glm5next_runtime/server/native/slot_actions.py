"""llama-server's slot actions, `POST /slots/{id_slot}?action=save|restore|erase` (with --slot-save-path DIR):
save a slot's sequence to DIR/filename (Model.save_state: tokens, cache rows, context checkpoints), load one back
into any slot, or empty a slot. Shapes, messages and quirks are llama-server's (tools/server tests pin them): an
id past the last slot wraps around, a busy slot is waited for, a bad file name is "Invalid filename".

One difference: a restored sequence brings its context checkpoints, so a prompt that parts from it before its end
still resumes from the nearest checkpoint (llama-server drops the checkpoints on restore and evaluates it all).
A file is written under a temporary name and renamed into place: a failed save leaves no partial file.
"""
from __future__ import annotations

import os
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request

from ...model import Model
from ..errors import APIError
from ..slots import SlotPool, SlotsClosed
from ..stopping import ShuttingDown

FORBIDDEN = set('/\\:*?"<>|')
RESTORE_FAILED = "Unable to restore slot, no available space in KV cache or invalid slot save file"


def valid_filename(name: object) -> bool:
    """llama.cpp's fs_validate_filename: a plain file name in DIR, portable across file systems (no separators or
    traversal, no control or look-alike characters, no leading or trailing space, no trailing dot, <= 255 bytes)."""
    if not isinstance(name, str) or not name or len(name.encode("utf-8", "surrogatepass")) > 255:
        return False
    if name != name.strip(" ") or name.endswith(".") or ".." in name or name == ".":
        return False
    for c in name:
        code = ord(c)
        if (c in FORBIDDEN or code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF
                or code in (0xFEFF, 0xFFFD, 0xFF0E, 0xFF0F, 0x2215, 0x2216)
                or unicodedata.category(c) == "Cf"):
            return False
    return True


def create_slot_router(pool: SlotPool, save_dir: Path | None) -> APIRouter:
    """The slot-action route; without `save_dir` (no --slot-save-path) every action is a 501, as in llama-server."""
    router = APIRouter()

    @router.post("/slots/{id_slot}")
    async def slot_action(id_slot: str, request: Request) -> dict[str, Any]:
        if save_dir is None:
            raise APIError(501, "This server does not support slots action. Start it with `--slot-save-path`")
        if not id_slot.isascii() or not id_slot.isdigit():
            raise APIError(400, "Invalid slot ID")
        action = request.query_params.get("action")
        if action not in ("save", "restore", "erase"):
            raise APIError(400, "Invalid action")
        path = None
        if action != "erase":
            filename = await filename_of(request)
            if not valid_filename(filename):
                raise APIError(400, "Invalid filename")
            path = save_dir / filename
        index = int(id_slot) % pool.size
        try:
            model = await pool.acquire(slot=index)  # a busy slot is waited for (llama-server defers the task)
        except SlotsClosed:
            raise ShuttingDown() from None
        try:
            if action == "save":
                return await anyio.to_thread.run_sync(save, model, path, index)
            if action == "restore":
                return await anyio.to_thread.run_sync(restore, model, path, index)
            n_erased = len(model.tokens)
            await anyio.to_thread.run_sync(model.reset)  # waits for the engine: the other slots may be running
            return {"id_slot": index, "n_erased": n_erased}
        finally:
            pool.release(model)

    return router


async def filename_of(request: Request) -> object:
    """The body's "filename" (None when the body is not a JSON object or has none)."""
    try:
        body = await request.json()
    except ValueError:
        return None
    return body.get("filename") if isinstance(body, dict) else None


def save(model: Model, path: Path, index: int) -> dict[str, Any]:
    """Write the slot's sequence to `path` (a temporary file renamed into place); an OS error (disk full, the
    directory gone) is a 500 naming the file."""
    start = time.perf_counter()
    data = model.save_state()
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise APIError(500, f"Unable to save slot ({path.name}: {e.strerror or e})") from None
    return {"id_slot": index, "filename": path.name, "n_saved": len(model.tokens), "n_written": len(data),
            "timings": {"save_ms": (time.perf_counter() - start) * 1e3}}


def restore(model: Model, path: Path, index: int) -> dict[str, Any]:
    """Replace the slot's sequence with the one saved at `path`; a missing, damaged or foreign file is a 400 and
    the slot keeps its sequence."""
    start = time.perf_counter()
    try:
        data = path.read_bytes()
        model.load_state(data)
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise APIError(400, f"{RESTORE_FAILED} ({path.name}: {reason})") from None
    return {"id_slot": index, "filename": path.name, "n_restored": len(model.tokens), "n_read": len(data),
            "timings": {"restore_ms": (time.perf_counter() - start) * 1e3}}
