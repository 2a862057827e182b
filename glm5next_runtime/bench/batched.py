"""glm5next-bench -npl B,...: llama-batched-bench's table (issue 24): B sequences at once on one engine, each a
prompt of -npp tokens then -ntg generated tokens, the prompts evaluated together and the tokens generated together
(one round of every sequence per step: glm5next's _core.Batch, with draft-MTP rows when --spec-n-max asks), and with
--llama-cpp the same on llama-cpp-python's llama.cpp (its low-level API: one llama_batch of every sequence's rows,
n_seq_max B), same file, same threads, runs interleaved. Columns as llama-batched-bench's: S_PP the prompt tokens of
all sequences per second, S_TG the generated tokens of all sequences per second (medians of -r repetitions).

The prompts are random ids (as llama-batched-bench's): draft-MTP rows then show what drafting costs at near-zero
acceptance; give --spec-prompts FILE... for text (each sequence a distinct opening of the files' token ids).
"""
from __future__ import annotations

import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from .runners import llama_cache_kwargs, llama_kv_override_array, llama_kv_overrides


class OursBatched:
    """B sequences of one glm5next engine (Model.another_sequence), run round by round with _core.Batch."""

    key = "glm5next"

    def __init__(self, path: Path, n_ctx: int, threads: int, n_batch: int, n_seq: int,
                 placement: dict[str, Any] | None = None, census: bool = False):
        """placement: Model's rpc / n_gpu_layers / cpu_moe / cache_type_k / warmup / override_kv / override_tensor
        keywords (None: the CPU alone); census: take the census of every graph run (_core.Engine.census_graphs; read by census())."""
        from ..model import Model
        self.models = [Model(path, n_ctx=n_ctx, n_threads=threads, n_batch=n_batch, n_seq_max=n_seq,
                             **(placement or {}))]
        self.backend = ",".join(sorted(set(self.models[0].placement().values())))
        self.models += [self.models[0].another_sequence() for _ in range(n_seq - 1)]
        self._policies: dict[int, _core.DraftLengthPolicy] = {}  # the batch's, by n_max: learned over the runs
        self.accepted_len = 0.0  # the last run's mean accepted length per drafting round
        self.models[0].engine.census_graphs(census)

    def census(self) -> dict[str, dict[str, Any]]:
        """The census of the last graph of each kind run (_core.Engine.graph_census; empty without census)."""
        return self.models[0].engine.graph_census()

    def run(self, prompts: Sequence[list[int]], n_gen: int, spec: Any = None,
            accept: float | None = None) -> tuple[float, float, int]:
        """(prompt seconds, generation seconds, tokens generated) of len(prompts) sequences; spec: a
        bench.SpecLength (n_max drafts per round, or adaptive lengths up to it), or None: no drafts; accept: a
        synthetic mean accepted length per round (--spec-accept: accepted drafts + 1), or None: real acceptance."""
        n_max, adaptive = (spec.n_max, spec.adaptive) if spec else (0, False)
        synthetic = -1.0 if accept is None or not spec else accept - 1.0
        gens = [m.generator(n_max=n_max, adaptive=adaptive, temperature=0, seed=0, synthetic_accepted=synthetic)
                for m in self.models[:len(prompts)]]
        batch = _core.Batch(self.models[0].engine)
        policy = self._policies.setdefault(n_max, self.models[0].new_draft_length_policy(n_max)) if adaptive else None
        for g, p in zip(gens, prompts):
            _core.Batch.start(g, p, False)
        t0 = time.perf_counter()
        while any(g.prompting for g in gens):
            self._round(batch, [g for g in gens if g.prompting], [1] * len(gens), policy)
        t_pp = time.perf_counter() - t0
        made = [0] * len(gens)
        t0 = time.perf_counter()
        while any(m < n_gen for m in made):
            going = [i for i, m in enumerate(made) if m < n_gen]
            emitted = self._round(batch, [gens[i] for i in going], [n_gen - made[i] for i in going], policy)
            for i, e in zip(going, emitted):
                made[i] += len(e)
        t_tg = time.perf_counter() - t0
        for g in gens:
            g.finish()
        # accepted drafts + 1 per drafting round, over the sequences (0 when no round drafted)
        self.accepted_len = statistics.mean(g.stats["mean_accepted_length"] for g in gens)
        return t_pp, t_tg, sum(min(m, n_gen) for m in made)

    @staticmethod
    def _round(batch: _core.Batch, gens: list, max_tokens: list[int], policy) -> list[list[int]]:
        batch.set(gens, max_tokens[:len(gens)], policy)
        batch.begin()
        while batch.drafting:
            batch.draft_step()
        batch.verify()
        return [batch.emitted(i) for i in range(len(gens))]


class LlamaCppBatched:
    """llama-cpp-python's llama.cpp through its low-level API: one context of n_seq_max sequences, every
    sequence's rows in one llama_batch (llama-batched-bench's loop)."""

    key = "llama.cpp"

    def __init__(self, path: Path, n_ctx: int, threads: int, n_batch: int, n_seq: int, n_gpu_layers: int = 0,
                 cache_type_k: str = "f16", kv_overrides: dict[str, Any] | None = None):
        """n_gpu_layers: llama.cpp's (layers on the GPU llama-cpp-python was built for; none in a CPU-only build);
        cache_type_k: the K and V caches' type, a name of cache_sizes.CACHE_TYPES (flash attention on for the
        quantized ones, as llama.cpp needs); kv_overrides: runners.llama_kv_overrides' dict, or None. Raises
        RuntimeError when llama.cpp cannot load the file."""
        import llama_cpp as L

        from ..stderr_capture import captured_stderr
        self.L = L
        L.llama_backend_init()
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx * n_seq
        cparams.n_batch = cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq
        cparams.n_threads = cparams.n_threads_batch = threads
        cache = llama_cache_kwargs(cache_type_k)  # the high-level API's keywords, set here one by one
        cparams.type_k, cparams.type_v = cache["type_k"], cache["type_v"]
        if cache["flash_attn"]:
            cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        overrides = llama_kv_override_array(L, kv_overrides or {})  # alive until the load below is done
        if overrides is not None:
            mparams.kv_overrides = overrides
        with captured_stderr() as log:  # llama.cpp logs to fd 2 whatever its verbosity
            self.model = L.llama_model_load_from_file(str(path).encode(), mparams)
            self.ctx = L.llama_init_from_model(self.model, cparams) if self.model else None
            text = log()
        if not self.ctx:
            raise RuntimeError(f"llama-cpp-python cannot load {path} (upstream loads files converted with --arch "
                               f"glm5-next):\n{text.strip()}")
        # where its layers went, as its load log says ("layer 3 assigned to device CUDA0, ..."): -ngl alone does not
        # tell (a build with no GPU keeps every layer on the CPU and still logs "offloaded 6/6 layers to GPU")
        self.backend = ",".join(sorted(set(re.findall(r"assigned to device ([^\s,]+)", text)))) or "CPU"
        self.n_batch = n_batch
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(max(n_batch, n_seq), 0, n_seq)

    def _decode(self, rows: list[tuple[int, int, int, bool]]) -> None:
        """rows: (token, position, sequence, logits) in n_batch chunks."""
        L, b = self.L, self.batch
        for at in range(0, len(rows), self.n_batch):
            chunk = rows[at:at + self.n_batch]
            for i, (token, pos, seq, logits) in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
                b.seq_id[i][0] = seq
            b.n_tokens = len(chunk)
            if L.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed")

    def _argmax(self, i: int) -> int:
        return int(np.argmax(np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))))

    def run(self, prompts: Sequence[list[int]], n_gen: int, spec: Any = None) -> tuple[float, float, int]:
        L = self.L
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        rows = [(t, pos, s, pos == len(p) - 1) for s, p in enumerate(prompts) for pos, t in enumerate(p)]
        t0 = time.perf_counter()
        self._decode(rows)
        t_pp = time.perf_counter() - t0
        n = len(prompts)
        # the last chunk's output rows are the last n rows when every prompt ends in it (n_batch >= all prompts'
        # last rows: true for the short prompts of this table; otherwise the next tokens are those of row 0)
        nexts = [self._argmax(i - n) if len(rows) <= self.n_batch else 0 for i in range(n)]
        t0 = time.perf_counter()
        for step in range(n_gen):
            self._decode([(nexts[s], len(prompts[s]) + step, s, True) for s in range(n)])
            nexts = [self._argmax(s) for s in range(n)]
        return t_pp, time.perf_counter() - t0, n * n_gen


def prompts_of(ours: OursBatched, n: int, n_prompt: int, seed: int, texts: list[str]) -> list[list[int]]:
    """n distinct prompts of n_prompt ids: random normal tokens, or (texts) consecutive stretches of their ids."""
    if texts:
        ids = [t for text in texts for t in ours.models[0].tokenize(text)]
        if len(ids) < n * n_prompt:
            raise ValueError(f"--spec-prompts give {len(ids)} tokens, fewer than {n} prompts of {n_prompt}")
        return [ids[i * n_prompt:(i + 1) * n_prompt] for i in range(n)]
    rng = np.random.default_rng(seed)
    from ..tokenizer import NORMAL
    normal = np.array([i for i, ty in enumerate(ours.models[0].tokenizer.token_types) if ty == NORMAL])
    return [normal[rng.integers(0, len(normal), n_prompt)].tolist() for _ in range(n)]


def run_batched(path: Path, npl: list[int], n_prompt: int, n_gen: int, threads: int, n_batch: int, repetitions: int,
                spec: list[Any], llama_cpp: bool, seed: int, texts: list[str],
                placement: dict[str, Any], census: dict[str, Any] | None = None,
                spec_accept: float | None = None) -> list[dict[str, Any]]:
    """The table's rows: per B in npl, per engine (and draft-MTP length: bench.SpecLength entries), the median S_PP
    and S_TG of `repetitions` runs after a warm-up run, and where each engine ran (backend). placement: glm5next's
    Model keywords (rpc, n_gpu_layers, cpu_moe, cache_type_k, warmup); llama.cpp takes n_gpu_layers and
    cache_type_k from it. census: a dict that receives glm5next's graph census by graph kind
    (_core.Engine.graph_census), taken over every run. spec_accept: the draft-MTP rows' synthetic mean accepted
    length per round (their engine names say it: "glm5next mtp3 @2.5"), or None: real acceptance."""
    n_ctx = n_prompt + n_gen + 16
    ours = OursBatched(path, n_ctx, threads, n_batch, max(npl), placement, census is not None)
    engines: list[Any] = [ours]
    if llama_cpp:
        engines.append(LlamaCppBatched(path, n_ctx, threads, n_batch, max(npl), placement["n_gpu_layers"],
                                       placement["cache_type_k"], llama_kv_overrides(ours.models[0].kv_overrides)))
    rows = []
    for b in npl:
        prompts = prompts_of(engines[0], b, n_prompt, seed, texts)
        runs: dict[tuple[str, Any], list[tuple[float, float, int]]] = {}
        accepted: dict[Any, list[float]] = {}  # draft-MTP rows: mean accepted length per run
        for rep in range(repetitions + 1):  # the first: a warm-up, not counted
            for engine in engines:
                for length in [None, *spec] if engine.key == "glm5next" else [None]:
                    # (llama.cpp's rows and glm5next's plain ones take no acceptance)
                    out = engine.run(prompts, n_gen, length, spec_accept) if length else engine.run(prompts, n_gen)
                    if rep:
                        runs.setdefault((engine.key, length), []).append(out)
                        if length:
                            accepted.setdefault(length, []).append(engine.accepted_len)
        for (key, length), outs in runs.items():
            backend = next(e.backend for e in engines if e.key == key)
            name = key if length is None else f"{key} {length}" + ("" if spec_accept is None else f" @{spec_accept:g}")
            row = {"engine": name, "backend": backend, "pp": n_prompt, "tg": n_gen, "b": b,
                   "s_pp": statistics.median(b * n_prompt / o[0] for o in outs),
                   "s_tg": statistics.median(o[2] / o[1] for o in outs)}
            rows.append(row | ({"accepted_len": statistics.median(accepted[length])} if length else {}))
    if census is not None:
        census.update(ours.census())
    return rows


def render_batched_md(rows: list[dict[str, Any]]) -> str:
    """llama-batched-bench's columns, one line per engine and B."""
    out = ["| engine | backend | PP | TG | B | S_PP t/s | S_TG t/s |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['engine']} | {r['backend']} | {r['pp']} | {r['tg']} | {r['b']} | {r['s_pp']:.1f} "
                   f"| {r['s_tg']:.1f} |")
    return "\n".join(out)


def render_census_md(census: dict[str, dict[str, Any]]) -> str:
    """--census's table: per graph kind its compute nodes (by device), splits, row groups, parts, products, one-matrix
    MUL_MAT_IDs, CUDA-graph blockers and device reads per run (runtime/graph_census.h)."""
    out = ["| graph | nodes | by device | splits | row groups | parts | products | one-matrix ids "
           "| CUDA-graph blockers | readbacks |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind, c in sorted(census.items()):
        devices = ", ".join(f"{d} {n}" for d, n in sorted(c["by_device"].items()))
        out.append(f"| {kind} | {c['nodes']} | {devices} | {c['splits']} | {c['row_groups']} | {c['parts']} "
                   f"| {c['products']} | {c['one_matrix_id']} | {c['cuda_graph_blockers']} | {c['readbacks']} |")
    return "\n".join(out)
