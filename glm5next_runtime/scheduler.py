"""One engine, many sequences (issue 24; docs/runtime.md, Multi-sequence): continuous batching of generations, as
llama-server's slots and vLLM's scheduler do it. Generations on sequences of one engine (Model.generation on the
Models Model.another_sequence made) are submitted from any thread; one thread runs them together, step by step:

    schedule    generations join (their prompt starts: what the sequence holds is resumed) and leave (ended or
                cancelled) between steps; a step takes every decoding generation and prompt ubatches of the oldest
                prompts up to a budget of n_batch prompt rows (the first always), so that a long prompt delays the
                others' next token by one ubatch at most;
    run         one round for all of them (_core.Batch): the draft head's steps in shared graphs, one trunk graph of
                every decode row, verify pass and prompt ubatch; grammars give their masks between the phases; the
                draft lengths of generations that adapt them are chosen for the batch by one policy (batch_policy);
    postprocess each generation's emitted tokens become text pieces (generate.Decoding), sent to its stream.

A generation's tokens, drafts and accepted drafts are those it gets alone (Generation.run): a row's results do not
depend on what it is batched with (csrc/graph/parts.h), and each generation's rounds are its own. Its stream is a
GenerationStream fed from the scheduler's thread; reading it never runs the model.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Generator as PyGenerator
from dataclasses import dataclass

from . import _core
from .generate import Generation, GenerationResult, GenerationStream, PromptProgress, TokenLogprob
from .grammar import RoundMasks


log = logging.getLogger("glm5next.scheduler")


class SchedulerClosed(RuntimeError):
    """The scheduler stopped: it takes no more generations."""


@dataclass
class _Piece:
    """What the stream of a generation gets: a text piece and the tokens (and log-probabilities) fed since the
    last piece, the text's included."""
    text: str
    tokens: list[int]
    logprobs: list[TokenLogprob]


class ScheduledGeneration:
    """A generation handed to a Scheduler: its `stream` (pieces as the rounds make them, with progress: the
    PromptProgress of its prompt among them; `result` at the end) and cancel(). Thread-safe."""

    def __init__(self, job: Generation, progress: bool = False):
        self.job = job
        self.progress = progress
        self._out: queue.SimpleQueue = queue.SimpleQueue()  # _Piece | GenerationResult | BaseException
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self.stream = GenerationStream(self._pieces(), [], None if job.decoding.logprobs is None else [])
        # the scheduler thread's own state of the run
        self.first_token_at: float | None = None  # perf_counter() when the first token came: the rounds' time begins
        self.sent = 0  # tokens of job.decoding already sent to the stream
        self.masks: RoundMasks | None = None
        self.failure: BaseException | None = None  # what failed it in the step under way (its grammar)
        self.prompt_at: float | None = None  # perf_counter() when its prompt started (progress)
        self.reported: PromptProgress | None = None  # the last progress sent

    def cancel(self) -> None:
        """Drop the generation at the next step (its stream then ends without a result); returns at once."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the scheduler is done with the generation's sequence (ended, failed or dropped after
        cancel()), so that the sequence may serve something else. Returns False on timeout."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _pieces(self) -> PyGenerator[str, None, GenerationResult | None]:
        while True:
            item = self._out.get()
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, GenerationResult) or item is None:
                return item
            if isinstance(item, PromptProgress):
                yield item
                continue
            self.stream.tokens.extend(item.tokens)
            if self.stream.logprobs is not None:
                self.stream.logprobs.extend(item.logprobs)
            if item.text:
                yield item.text

    # --- the scheduler thread's side ---
    def send(self, text: str) -> None:
        tokens = self.job.decoding.tokens
        logprobs = self.job.decoding.logprobs
        new = slice(self.sent, len(tokens))
        self._out.put(_Piece(text, tokens[new], logprobs[new] if logprobs is not None else []))
        self.sent = len(tokens)

    def report_progress(self) -> None:
        """With progress: how far the prompt has come, unless that was said already (processed only grows)."""
        if self.reported is not None and self.reported.processed == self.reported.total:
            return  # the prompt is done: nothing more to say, every step after
        generator = self.job.generator
        total = len(self.job.prompt)
        processed = total - generator.prompt_left
        if self.reported is None:
            self.prompt_at = time.perf_counter()
            now = PromptProgress(total, generator.stats["n_cached_tokens"], processed, 0.0)
        elif processed > self.reported.processed:
            now = self.reported._replace(processed=processed, time_ms=(time.perf_counter() - self.prompt_at) * 1e3)
        else:
            return
        self._out.put(now)
        self.reported = now

    def end(self, result: GenerationResult | BaseException | None) -> None:
        """The last item of the stream (None: dropped), and the sequence is free."""
        if isinstance(result, GenerationResult) and self.sent < len(self.job.decoding.tokens):
            self.send("")
        self._out.put(result)
        self._done.set()


class Scheduler:
    """Runs the generations submitted to it on one thread, batched step by step (module docstring).

    n_batch: the prompt rows a step evaluates at most (besides the first prompt ubatch, which always goes; the
    engine's n_batch bounds each ubatch). Start it with start(); close() ends it."""

    def __init__(self, n_batch: int):
        if n_batch < 1:
            raise ValueError(f"n_batch = {n_batch}: must be >= 1")
        self.n_batch = n_batch
        self._lock = threading.Condition()
        self._incoming: list[ScheduledGeneration] = []
        self._running: list[ScheduledGeneration] = []  # in arrival order
        self._closed = False
        self._thread: threading.Thread | None = None
        self.steps = 0  # steps run (rounds of one or more generations)
        self.rows_per_step: list[int] = []  # per step: the generations in it (the latest 256 steps)
        # the draft length policies of batched rounds, by (n_max, n_min, decoding generations that adapt): what
        # drafting costs a batch of that size and how much of it is accepted, learned over the scheduler's life (a
        # generation's own policy prices its rounds alone)
        self._batch_policies: dict[tuple[int, int, int], _core.DraftLengthPolicy] = {}

    def start(self) -> Scheduler:
        """Start the scheduler's thread (a daemon: it does not keep the process alive). Returns self."""
        self._thread = threading.Thread(target=self._loop, name="glm5next-scheduler", daemon=True)
        self._thread.start()
        return self

    def submit(self, job: Generation, progress: bool = False) -> ScheduledGeneration:
        """Run `job` with the others (from any thread): it joins at the next step. Its sequence must not be in
        use by another generation until its ScheduledGeneration is done. progress: its stream also yields the
        PromptProgress of its prompt (when it starts, and after each step that evaluated some of it), before its
        first piece. Raises SchedulerClosed after close()."""
        handle = ScheduledGeneration(job, progress)
        with self._lock:
            if self._closed:
                raise SchedulerClosed("the scheduler is closed")
            self._incoming.append(handle)
            self._lock.notify()
        return handle

    def close(self) -> None:
        """Stop after the current step: generations not done end their streams with SchedulerClosed."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def busy(self) -> int:
        """Generations submitted and not done."""
        with self._lock:
            return len(self._incoming) + len(self._running)

    # --- the thread ---
    def _loop(self) -> None:
        try:
            while self._turn():
                pass
        except BaseException:  # a defect: nothing can be served any more, and no request is left waiting
            log.exception("the scheduler stopped")
            raise
        finally:
            with self._lock:
                self._closed = True
                left, self._incoming = self._running + self._incoming, []
                self._running = []
            for handle in left:
                if not handle.done:
                    handle.end(SchedulerClosed("the scheduler stopped"))

    def _turn(self) -> bool:
        """Waits for work, then admits what came and runs one step. False once closed. (A method of its own: its
        locals go when it returns, so that an idle scheduler holds no generation, and no model, alive.)"""
        with self._lock:
            while not self._incoming and not self._running and not self._closed:
                self._lock.wait()
            if self._closed:
                return False
            incoming, self._incoming = self._incoming, []
        for handle in incoming:
            self._admit(handle)
        self._drop_cancelled()
        if self._running:
            self._step(self._schedule())
        return True

    def _admit(self, handle: ScheduledGeneration) -> None:
        if handle.cancelled:  # gone before it started: its sequence is left as it is
            handle.end(None)
            return
        job = handle.job
        try:
            _core.Batch.start(job.generator, job.prompt, job.cache_prompt)
        except Exception as e:  # noqa: BLE001 - the generation's own fault (its prompt): its stream says so
            handle.end(e)
            return
        for policy in self._batch_policies.values():
            policy.reconsider()  # a batch policy that gave up judges anew now and then (RECONSIDER_AFTER)
            if job.generator.drafting:  # a new text to draft on: a quiet one probes it (DraftLengthPolicy.wake)
                policy.wake()
        if handle.progress:
            handle.report_progress()
        self._running.append(handle)

    def _drop_cancelled(self) -> None:
        for handle in [h for h in self._running if h.cancelled]:
            self._running.remove(handle)
            try:
                if not handle.job.generator.prompting:
                    handle.job.generator.finish()  # the draft head's rows, for a next prompt that resumes here
            except Exception:  # noqa: BLE001 - the request is gone either way
                log.exception("finishing a cancelled generation")
            handle.end(None)

    def _schedule(self) -> list[ScheduledGeneration]:
        """Every decoding generation, and prompts (oldest first) while their next ubatches fit n_batch rows (the
        first always)."""
        step, budget = [], self.n_batch
        for handle in self._running:
            generator = handle.job.generator
            if generator.prompting:
                rows = generator.prompt_next_rows
                if rows > budget and budget < self.n_batch:
                    continue
                budget -= rows
            step.append(handle)
        return step

    def _step(self, handles: list[ScheduledGeneration]) -> None:
        batch = _core.Batch(handles[0].job.engine)
        for handle in handles:
            handle.failure = None
        try:
            batch.set([h.job.generator for h in handles], [max(h.job.decoding.budget, 1) for h in handles],
                      self.batch_policy(handles))
            batch.begin()
            self._draft(batch, handles)
            batch.verify([self._verify_masks(h) for h in handles])
        except Exception as e:  # noqa: BLE001 - the engine failed the step: its generations, not the server
            for handle in handles:
                self._running.remove(handle)
                handle.end(e)
            return
        self.steps += 1
        self.rows_per_step = [*self.rows_per_step[-255:], len(handles)]
        for i, handle in enumerate(handles):
            # one generation's failure (its grammar, a sampler left with no token) ends it alone; the C++ side left
            # its sequence whole (_core.Batch.error)
            failure = handle.failure or (RuntimeError(batch.error(i)) if batch.error(i) else None)
            try:
                if failure is not None:
                    raise failure
                if handle.progress:
                    handle.report_progress()
                if batch.emitted(i):
                    self._postprocess(handle, batch.emitted(i))
            except Exception as e:  # noqa: BLE001
                if handle in self._running:
                    self._running.remove(handle)
                handle.end(e)

    def batch_policy(self, handles: list[ScheduledGeneration]) -> _core.DraftLengthPolicy | None:
        """The policy that chooses the draft lengths of a batched round (_core.Batch.set): one per n_max and n_min of
        the first generation whose lengths adapt and per number of decoding generations that adapt (the batch's
        size), made on first use and kept. Per size, because a round's costs grow with its sequences: one policy for
        all sizes timed 4-sequence rounds among 2- and 3-sequence ones (a server's batch as its clients come and
        go) and priced drafting by their mix."""
        adapting = [h.job.generator for h in handles if h.job.generator.policy is not None]
        if not adapting:
            return None
        own = adapting[0].policy
        key = (own.n_max, own.n_min, sum(not g.prompting for g in adapting))
        policy = self._batch_policies.get(key)
        if policy is None:
            policy = self._batch_policies[key] = _core.DraftLengthPolicy(own.n_max, own.n_min, own.prior)
        return policy

    def _draft(self, batch: _core.Batch, handles: list[ScheduledGeneration]) -> None:
        """The draft steps, each generation under its grammar's mask after its drafts so far. A grammar that fails
        fails its generation (handle.failure), whose drafts then go on unconstrained to the round's end."""
        for handle in handles:
            constraint = handle.job.constraint
            if constraint is not None and not handle.job.generator.prompting:
                handle.masks = constraint.round(drafting=True)
        while batch.drafting:
            drafted = [len(batch.drafts(i)) for i in range(len(handles))]
            batch.draft_step([h.masks.draft_mask() if h.masks and not h.failure else None for h in handles])
            for i, handle in enumerate(handles):
                drafts = batch.drafts(i)
                if handle.masks is not None and not handle.failure and len(drafts) > drafted[i]:
                    try:
                        handle.masks.drafted(drafts[-1])
                    except Exception as e:  # noqa: BLE001
                        handle.failure = e

    def _verify_masks(self, handle: ScheduledGeneration):
        constraint = handle.job.constraint
        if constraint is None or handle.failure is not None:
            return None
        try:
            if handle.job.generator.prompting:  # the first token's, read if the prompt ends in this step
                return constraint.mask()
            return handle.masks.verify_masks()
        except Exception as e:  # noqa: BLE001
            handle.failure = e
            return None

    def _postprocess(self, handle: ScheduledGeneration, emitted: list[int]) -> None:
        job = handle.job
        generator, run = job.generator, job.decoding
        if job.constraint is not None:  # the first token (sampled under constraint.mask()) or the round's
            job.constraint.consume(emitted)
            handle.masks = None
        if handle.first_token_at is None:
            handle.first_token_at = time.perf_counter()
            stats, total = generator.stats, len(job.prompt)
            handle.stream.prompt = PromptProgress(total, stats["n_cached_tokens"], total, stats["prompt_ms"])
        if not run.done:  # (max_tokens 0: the prompt only)
            for piece in run.feed(emitted, generator.probs if run.logprobs is not None else []):
                handle.send(piece)
        if run.done or generator.room <= 0:
            self._running.remove(handle)
            generator.finish()
            for piece in run.end():
                handle.send(piece)
            handle.end(run.result(generator.stats, time.perf_counter() - handle.first_token_at))
