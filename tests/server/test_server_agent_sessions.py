"""Coding agents' sessions replayed (issue 25): tests/server/agent_sessions/*.json are sessions in the request shapes of
Claude Code, opencode, Cline, Continue, Open WebUI and Codex (each file says where its shape comes from), every turn the whole
conversation as the client sends it: its system prompt and tools, the assistant's earlier turns as the client
sends them back (thinking blocks, tool calls, XML tool use, reasoning items), tool results. Each session is
replayed against one server and must resume its prompt cache every turn: from turn 2 on, at least 90% of the
previous turn's prompt is read from the cache (Claude Code's billing line changes on every request), and nothing is
refused. The cache figures per turn are printed (pytest -s) and in every failure message.

The recorded assistant turns are not what the tiny model answered: every turn parts from the slot's sequence at the
previous generation prompt, as a turn does whose template re-renders the answer."""
from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from live_server import Server, post_json

SESSIONS = sorted((Path(__file__).parent / "agent_sessions").glob("*.json"))
# what the replay changes in each request: greedy and short (the claims are about the prompt), not streamed
REPLAY = {"/v1/messages": {"max_tokens": 8, "temperature": 0, "stream": False},
          "/v1/chat/completions": {"max_tokens": 8, "temperature": 0, "stream": False},
          "/v1/responses": {"max_output_tokens": 8, "temperature": 0, "stream": False}}


@pytest.fixture(scope="module")
def server(predictable_gguf, tmp_path_factory):
    s = Server(predictable_gguf, tmp_path_factory.mktemp("sessions") / "server.log", n_ctx=8192)
    yield s
    s.stop()


def stamped(value, fields: dict[str, str]):
    """`value` with "{name}" written as fields[name] in every string (the parts a client changes per request)."""
    if isinstance(value, str):
        for name, text in fields.items():
            value = value.replace("{" + name + "}", text)
        return value
    if isinstance(value, list):
        return [stamped(v, fields) for v in value]
    if isinstance(value, dict):
        return {k: stamped(v, fields) for k, v in value.items()}
    return value


def prompt_and_cached(endpoint: str, out: dict) -> tuple[int, int]:
    """(prompt tokens, of those read from the cache) in each API's usage."""
    usage = out["usage"]
    if endpoint == "/v1/messages":
        return usage["input_tokens"] + usage["cache_read_input_tokens"], usage["cache_read_input_tokens"]
    if endpoint == "/v1/responses":
        return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def replay(server: Server, session: dict) -> list[tuple[int, int, int]]:
    """Sends the session's turns in order; returns (turn, prompt tokens, cached) per turn."""
    endpoint = session["endpoint"]
    history: list[dict] = []
    figures = []
    for turn, items in enumerate(session["turns"], 1):
        history += items
        fields = {"fingerprint": secrets.token_hex(2)[:3], "cch": secrets.token_hex(3)[:5]}
        body = stamped(session["body"], fields) | {session["history"]: history} | REPLAY[endpoint]
        status, out = post_json(server, endpoint, body, headers=session["headers"])
        assert status == 200, (session["client"], turn, out)
        figures.append((turn, *prompt_and_cached(endpoint, out)))
    return figures


@pytest.mark.parametrize("path", SESSIONS, ids=[p.stem for p in SESSIONS])
def test_an_agent_session_reads_its_earlier_turns_from_the_cache(server, path):
    session = json.loads(path.read_text())
    figures = replay(server, session)
    print(f"{session['client']}: (turn, prompt tokens, cached)", figures)  # the report (pytest -s)
    assert figures[0][2] == 0 or figures[0][2] < figures[0][1] / 2, figures  # another session was in the slot
    for (_, before, _), (turn, prompt, cached) in zip(figures, figures[1:]):
        assert cached >= 0.9 * before, (session["client"], "turn, prompt tokens, cached:", figures)
