"""The chat template rendered in worker processes, with bounded time and memory.

A chat template comes with the model file: it is untrusted code. jinja2's sandbox (../chat.py) keeps it away from
the machine, not from exhausting it: `{{ [1]*100000000 }}` took 20 GB, two nested loops run for hours. Rather than
guess every construct that grows (repetition, padding, joins, recursion, captured blocks, ...), each render runs in a
child process whose heap is capped (RLIMIT_DATA) and whose answer has a deadline; a worker that runs out of either is
killed and replaced, and the request gets a 400 naming the limit. Rendered text longer than the context could hold
(`max_chars`) is not even sent back.

render() blocks until its worker answers: call it from a worker thread, never on the event loop.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import resource
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ..chat import ChatTemplate, ChatTemplateError

log = logging.getLogger("glm5next.server")
SPAWN = multiprocessing.get_context("spawn")  # never fork a process that runs ggml and uvicorn threads
START_S = 60.0  # a worker's start-up (a fresh interpreter importing the package) may take this long


@dataclass(frozen=True)
class TemplateLimits:
    """seconds: the longest one render may take (its answer included); memory_mib: heap a worker may grow by
    beyond what it holds after start-up; max_chars: rendered text longer than this is refused (None: no limit)."""
    seconds: float = 5.0
    memory_mib: int = 512
    max_chars: int | None = None


class TemplateLimitError(ChatTemplateError):
    """A render ran out of time or memory (its worker was replaced)."""


class RenderedTooLong(Exception):
    """The rendered text has `n_chars` characters, more than TemplateLimits.max_chars."""

    def __init__(self, n_chars: int):
        super().__init__(f"the rendered prompt has {n_chars} characters")
        self.n_chars = n_chars


class TemplateWorkers:
    """`workers` processes, each rendering `source` (kept as .source) for one request at a time; a request waits for
    a free one."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", workers: int = 1,
                 limits: TemplateLimits = TemplateLimits()):
        """Starts the workers and waits until they are ready. Raises ChatTemplateError when the template does not
        parse (checked here first) or a worker does not start."""
        ChatTemplate(source, bos_token, eos_token)
        self.source = source
        self.limits = limits
        self._args = (source, bos_token, eos_token, limits.memory_mib, limits.max_chars)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        started = [self._start() for _ in range(workers)]
        try:
            for worker in started:
                worker.wait_ready()
        except _Gone as e:
            self.close()
            raise ChatTemplateError(str(e)) from None
        for worker in started:
            self._idle.put(worker)

    def render(self, messages: Sequence[Mapping[str, Any]], variables: Mapping[str, Any] | None = None,
               add_generation_prompt: bool = True) -> str:
        """ChatTemplate.render in a worker (blocking). Raises ChatTemplateError when the template fails on these
        messages, TemplateLimitError (one) when it runs out of time or memory, RenderedTooLong past max_chars."""
        worker = self._idle.get()
        try:
            try:
                return worker.render(messages, variables, add_generation_prompt, self.limits)
            except _Gone as gone:
                worker = self._replace(worker, gone)
                if gone.limit:  # the time or memory limit: these messages' doing
                    raise TemplateLimitError(str(gone)) from None
            # a worker found dead, or that died without a word, may have been killed from outside (the OOM killer,
            # an operator): once more on its replacement, and only a second death is blamed on the messages
            try:
                return worker.render(messages, variables, add_generation_prompt, self.limits)
            except _Gone as gone:
                worker = self._replace(worker, gone)
                raise TemplateLimitError(str(gone)) from None
        finally:
            self._idle.put(worker)

    def pids(self) -> list[int]:
        """The process ids of the running workers (what the server's memory report and the tests look at)."""
        with self._lock:
            return [w.process.pid for w in self._all]

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        with self._lock:
            self._closed = True
            workers, self._all = self._all, []
        for worker in workers:
            worker.stop()

    def _start(self) -> _Worker:
        with self._lock:
            worker = _Worker(*self._args)
            if self._closed:
                worker.stop()
            else:
                self._all.append(worker)
            return worker

    def _replace(self, worker: _Worker, why: _Gone) -> _Worker:
        log.warning("%s: its worker process is replaced", why)
        worker.stop()
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)
        return self._start()


class _Gone(Exception):
    """The worker is gone: `limit` when it hit the time or memory limit on a request (the request's doing)."""

    def __init__(self, message: str, limit: bool = False):
        super().__init__(message)
        self.limit = limit


class _Worker:
    """One child process and its pipe."""

    def __init__(self, source: str, bos_token: str, eos_token: str, memory_mib: int, max_chars: int | None):
        self.conn, child = SPAWN.Pipe()
        self.process = SPAWN.Process(target=_serve, name="glm5next-template", daemon=True,
                                     args=(child, source, bos_token, eos_token, memory_mib, max_chars))
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self) -> None:
        """Wait for the worker's first word (it has compiled the template). Raises _Gone when it does not come."""
        if self.ready:
            return
        try:
            self.ready = self.conn.poll(START_S) and self.conn.recv() == ("ready", None)
        except (EOFError, OSError):
            pass
        if not self.ready:
            raise _Gone("the chat template's worker process did not start")

    def render(self, messages: Sequence[Mapping[str, Any]], variables: Mapping[str, Any] | None,
               add_generation_prompt: bool, limits: TemplateLimits) -> str:
        self.wait_ready()
        if not self.process.is_alive():  # died while idle (killed, OOM): not these messages' fault
            raise _Gone("the chat template's worker process had died")
        try:
            self.conn.send((list(messages), dict(variables or {}), add_generation_prompt))
        except (OSError, EOFError):  # a broken pipe, or a worker already stopped
            raise _Gone("the chat template's worker process had died") from None
        if not self.conn.poll(limits.seconds):
            raise _Gone(f"the chat template took longer than {limits.seconds:g} s on these messages", limit=True)
        try:
            kind, value = self.conn.recv()
        except (EOFError, ConnectionResetError):
            raise _Gone("the chat template's worker process died on these messages") from None
        if kind == "ok":
            return value
        if kind == "long":
            raise RenderedTooLong(value)
        if kind == "memory":
            raise _Gone(f"the chat template needs more than {limits.memory_mib} MiB of memory on these messages",
                        limit=True)
        raise ChatTemplateError(value)

    def stop(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


def _serve(conn: Connection, source: str, bos_token: str, eos_token: str, memory_mib: int,
           max_chars: int | None) -> None:
    """The worker process: render requests from `conn` until it closes (or the parent is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the server decides
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    _cap_heap(memory_mib)
    template = ChatTemplate(source, bos_token, eos_token)
    conn.send(("ready", None))
    while True:
        try:
            messages, variables, add_generation_prompt = conn.recv()
        except (EOFError, OSError):
            return
        try:
            text = template.render(messages, variables, add_generation_prompt)
            reply = ("ok", text) if max_chars is None or len(text) <= max_chars else ("long", len(text))
            del text
        except ChatTemplateError as e:
            reply = ("error", str(e))
        except MemoryError:
            conn.send(("memory", None))
            return  # a fresh worker takes over: this one's heap may be fragmented or half-built
        conn.send(reply)
        del reply


def _cap_heap(memory_mib: int) -> None:
    """RLIMIT_DATA (heap and private mappings, not the mapped libraries) at what the process holds now plus
    memory_mib: an allocation past it is a MemoryError."""
    with open("/proc/self/status") as f:
        data_kib = next(int(line.split()[1]) for line in f if line.startswith("VmData:"))
    cap = (data_kib << 10) + (memory_mib << 20)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))


def _exit_with_parent(parent: int) -> None:
    """A worker stuck in a render would outlive a killed server: it checks on its parent every second."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)
