"""The report's model block: model_info (name, size, parameters, backend, and what crosses devices per graph run,
measured on the loaded model) and the human-readable sizes and parameter counts the tables print."""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .runners import OursRunner


def human_bytes(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def human_params(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def _profiled(m: Any, run: Callable[[], dict[str, Any]], rows: int, n_runs: int) -> dict[str, Any]:
    """Splits, bytes copied between devices and median copy seconds of the graph whose traffic `run` returns
    (m.graph_traffic right after it ran), over n_runs with profile_traffic on."""
    seconds, t = [], {}
    m.profile_traffic(True)
    try:
        for _ in range(n_runs):
            t = run()
            seconds.append(t["copy_seconds"])
    finally:
        m.profile_traffic(False)
    return {"rows": rows, "splits": t["splits"], "bytes_copied": t["bytes_copied"],
            "copy_seconds": statistics.median(seconds)}


def _traffic(m: Any, tokens: list[int], logits_all: bool, n_runs: int) -> dict[str, Any]:
    """_profiled for evaluating `tokens` after a reset."""
    def run() -> dict[str, Any]:
        m.reset()
        m.eval(tokens, logits_all=logits_all)
        return m.graph_traffic
    return _profiled(m, run, len(tokens), n_runs)


def _draft_step_traffic(m: Any, n_runs: int) -> dict[str, Any] | None:
    """_profiled for a draft step that reuses step 0's selection (a round's most frequent graph), or None without
    drafting (or room for a round of 2 drafts after a token)."""
    if m.spec_type != "draft-mtp" or m.n_ctx < 4:
        return None

    def run() -> dict[str, Any]:
        g = m.generator(n_max=2, temperature=0, adaptive=False)
        g.start([0])
        g.begin_draft()
        if g.draft_next() >= 0:  # the next step runs with the first draft
            g.draft_next()
        traffic = m.graph_traffic
        g.verify(0)
        return traffic

    try:
        return _profiled(m, run, 1, n_runs)
    finally:
        m.reset()


def model_info(ours: OursRunner, path: Path, threads: int, n_batch: int, n_ctx: int) -> dict[str, Any]:
    m = ours.model
    # What crosses devices per graph (runtime/traffic.h; the rows reset the sequence before they run): a decode
    # token, a verify pass with 3 drafts, a prefill ubatch, a draft step (with a NextN layer). Copy time is measured
    # with every node synced.
    traffic = {"decode": _traffic(m, [0], False, 5), "verify4": _traffic(m, [0] * min(4, m.n_ctx), True, 3),
               "prefill": _traffic(m, [0] * min(n_batch, m.n_ctx), False, 1)}
    if (draft := _draft_step_traffic(m, 3)) is not None:
        traffic["draft step"] = draft
    tensors = m.tensors()
    size = sum(t.nbytes for t in tensors)
    params = sum(math.prod(t.shape) for t in tensors)
    try:
        import gguf
        ftype = gguf.LlamaFileType(m.metadata("general.file_type")).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (KeyError, ValueError):
        by_type: dict[str, int] = {}
        for _, ty, _, nbytes in tensors:
            by_type[ty] = by_type.get(ty, 0) + nbytes
        ftype = max(by_type, key=by_type.get).upper()
    arch = m.metadata("general.architecture")
    return {"model": f"{arch} {human_params(params).replace(' ', '')} {ftype}", "path": str(path),
            "file_bytes": path.stat().st_size, "size_bytes": size, "params": params,
            "backend": ",".join(sorted(set(m.placement().values()))) + f" ({traffic['decode']['splits']} splits)",
            "traffic": traffic,
            "threads": threads,
            "n_batch": n_batch,
            "n_ctx": n_ctx, "cache_type_k": m.sequence.cache_type, "indexer_top_k": m.indexer_top_k,
            "kv_overrides": [f"{key}={kind}:{value}" for key, kind, value in m.kv_overrides]}
