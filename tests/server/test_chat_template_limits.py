"""Chat templates are untrusted input (issue 14): a template from a model file renders in a worker process with
bounded memory and time (glm5next_runtime/server/templates.py). `{{ [1]*100000000 }}` took the server to 20 GB;
now it is a 400 naming the limit, the server's memory does not move, and the next request is served. Every
template failure (a range too large, an include, 1/0, raise_exception) is a clean 400, never a 500 or a
traceback, and compiling a template evaluates nothing."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from glm5next_runtime.chat import ChatTemplate, ChatTemplateError
from glm5next_runtime.server.templates import RenderedTooLong, TemplateLimitError, TemplateLimits, TemplateWorkers
from live_server import Server, get, post_json

MIB = 1 << 20
BOMBS = {  # a message's content picks the template's branch
    "list": "{{ [1]*100000000 }}",
    "string": "{{ 'x' * 10**10 }}",
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                "{{ ns.s|length }}",
    "padding": "{{ 'x'.center(2**31) }}",
    "join": "{{ ('x' * 1000000)|list|join('y' * 1000) }}",
}
SLOW = {
    "loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "recursion": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
}
FAILURES = {  # what used to be a 500 (and a traceback), next to what was already a 400
    "range": "{{ range(10**9)|list }}",
    "include": "{% include 'other.jinja' %}",
    "zero": "{{ 1/0 }}",
    "undefined": "{{ nothing.at.all }}",
    "unsafe": "{{ ''.__class__.__mro__ }}",
    "raise": "{{ raise_exception('only user turns') }}",
    "method": "{{ messages.append(1) }}",
}
NORMAL = "[gMASK]<sop><|user|>\n{{ c }}<|assistant|>\n"


def branching(cases: dict[str, str]) -> str:
    """A template whose last message's content picks one of `cases`, else renders normally."""
    out = "{%- set c = messages[-1].content -%}"
    for i, (name, body) in enumerate(cases.items()):
        out += f"{{%- {'if' if i == 0 else 'elif'} c == '{name}' -%}}{body}"
    return out + "{%- else -%}" + NORMAL + "{%- endif -%}"


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


@pytest.fixture(scope="module")
def workers():
    pool = TemplateWorkers(branching({**BOMBS, **SLOW, **FAILURES}),
                           limits=TemplateLimits(seconds=1.0, memory_mib=256, max_chars=100_000))
    yield pool
    pool.close()


def own_rss() -> int:
    return psutil.Process().memory_info().rss


@pytest.mark.parametrize("name", BOMBS)
def test_a_memory_bomb_is_refused_and_the_next_render_works(workers, name):
    before = own_rss()
    start = time.perf_counter()
    with pytest.raises(TemplateLimitError, match=r"more than 256 MiB|longer than 1 s"):
        workers.render(user(name))
    assert time.perf_counter() - start < 5.0
    assert own_rss() - before < 50 * MIB  # the worker took the memory, not this process
    assert workers.render(user("hi")) == "[gMASK]<sop><|user|>\nhi<|assistant|>"  # jinja2 drops the last \n


@pytest.mark.parametrize("name", SLOW)
def test_a_template_that_runs_too_long_is_stopped_at_its_deadline(workers, name):
    start = time.perf_counter()
    with pytest.raises(TemplateLimitError, match="took longer than 1 s"):
        workers.render(user(name))
    assert time.perf_counter() - start < 3.0
    assert workers.render(user("again")).endswith("again<|assistant|>")


@pytest.mark.parametrize("name", FAILURES)
def test_every_template_failure_is_a_template_error_without_internals(workers, name):
    with pytest.raises(ChatTemplateError) as e:
        workers.render(user(name))
    assert not isinstance(e.value, TemplateLimitError)
    assert str(e.value).startswith("the chat template failed on these messages") or "only user turns" in str(e.value)
    assert "0x" not in str(e.value) and "Traceback" not in str(e.value)


def test_rendered_text_past_max_chars_is_not_sent_back(workers):
    with pytest.raises(RenderedTooLong) as e:
        workers.render(user("y" * 200_000))
    assert e.value.n_chars > 100_000


def test_a_worker_that_died_between_requests_is_replaced_unnoticed(workers):
    for pid in workers.pids():
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the killed worker did not die"
            time.sleep(0.01)
    assert workers.render(user("still")).endswith("still<|assistant|>")


def test_compiling_a_template_evaluates_nothing():
    """jinja2 folds constant expressions while compiling: the bombs would go off at start-up, in the server."""
    before = own_rss()
    start = time.perf_counter()
    for body in (*BOMBS.values(), "{{ 'x'|center(10**9) }}", "{% if [1]*10**9 %}{% endif %}"):
        ChatTemplate(body)
    assert time.perf_counter() - start < 1.0 and own_rss() - before < 50 * MIB


# ------------------------------------------------------------------------------------------ a live server

@pytest.fixture(scope="module")
def bombed(checkpoints, tmp_path_factory):
    """A server whose file's chat template holds the bombs and the failures (through --override-kv)."""
    gguf: Path = checkpoints.convert(checkpoints.make("server-no-nextn", "tiny", dtype="f32", nextn=False),
                                     outtype="f32")
    template = branching({**BOMBS, **FAILURES})
    server = Server(gguf, tmp_path_factory.mktemp("bombed") / "server.log",
                    "--override-kv", f"tokenizer.chat_template=str:{template}")
    yield server
    server.stop()


@pytest.mark.parametrize("name", [*BOMBS, *FAILURES])
def test_a_bad_template_is_a_400_and_the_server_stays_small(bombed, name):
    before = psutil.Process(bombed.proc.pid).memory_info().rss
    status, out = post_json(bombed, "/v1/chat/completions", {"messages": user(name), "max_tokens": 1})
    assert status == 400 and out["error"]["type"] == "invalid_request_error"
    assert "chat template" in out["error"]["message"] or "only user turns" in out["error"]["message"]
    assert psutil.Process(bombed.proc.pid).memory_info().rss - before < 50 * MIB
    status, out = post_json(bombed, "/v1/chat/completions", {"messages": user("fine"), "max_tokens": 1})
    assert status == 200 and get(bombed, "/health")[0] == 200


def test_a_bad_template_leaves_no_traceback_in_the_log(bombed):
    post_json(bombed, "/v1/chat/completions", {"messages": user("zero"), "max_tokens": 1})
    log = bombed.log.read_text()
    assert "Traceback" not in log and " 500 " not in log
