"""Fuzzing the request JSON of /v1/completions and /v1/chat/completions (issue 14), seeded and bounded (a few
seconds): valid requests mutated field by field (wrong types, huge and negative numbers, NaN and Infinity, deep
nesting, unknown fields, huge strings, control tokens, lone surrogates) and byte by byte (truncated, invalid UTF-8,
a byte-order mark, random bytes). Every answer is a 4xx with an OpenAI-shaped error, or a 200 for a body that is
valid (a stream then ends with [DONE] and no error event); never a 500, never a hung connection. Afterwards the
server is healthy, its slots are idle and its memory has not run away (the figures are printed)."""
from __future__ import annotations

import json
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from live_server import Server, get, request

SEED = 14
CASES = 1000
N_CTX = 256  # a valid body that asks for no token limit still ends soon
MIB = 1 << 20

BASES = {
    "/v1/completions": {"prompt": "Hello world", "max_tokens": 2, "temperature": 0},
    "/v1/chat/completions": {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi there"}], "max_tokens": 2},
}
FIELDS = ["model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_k", "top_p",
          "min_p", "seed", "stop", "stream", "n", "speculative", "speculative.n_max", "chat_template_kwargs",
          "logprobs", "tools", "response_format"]
HUGE = "x" * 200_000
NUMBERS = [0, 1, -1, 2, 2**31 - 1, 2**31, -2**31 - 1, 2**63, 2**64, -2**64, 10**30, 0.5, -0.0, 1e308, -1e308, 1e-308]
SPECIAL = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]  # raw JSON literals json.dumps would not write


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value] if depth % 2 else {"a": value}
    return value


def random_value(rng: random.Random) -> object:
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind == 1:
        return rng.choice([None, True, False, "", "5", "hello", "<|assistant|>", "[gMASK]", "\u0000", "🙂" * 3])
    if kind == 2:
        return rng.choice([[], {}, [1, 2], ["a", ""], {"a": 1}, {"n_max": rng.choice(NUMBERS)}])
    if kind == 3:
        return nested(rng.choice([5, 50, 300]))
    if kind == 4:
        return rng.choice([HUGE, [HUGE], {"role": "user", "content": HUGE}])
    if kind == 5:
        return [{"role": rng.choice(["user", "assistant", "system", "tool", "bad", 5, None]),
                 "content": rng.choice(["hi", "", None, 5, [{"type": "text", "text": "x"}], [{"type": "image"}]])}
                for _ in range(rng.randrange(0, 4))]
    if kind == 6:
        return [rng.randrange(-5, 1000) for _ in range(rng.randrange(0, 6))]
    if kind == 7:
        return rng.random() * 10 ** rng.randrange(-5, 40) * rng.choice([1, -1])
    return {"x" * rng.randrange(1, 5): random_value(rng) for _ in range(rng.randrange(1, 3))}


def mutate(rng: random.Random, body: dict) -> dict:
    body = json.loads(json.dumps(body))
    for _ in range(rng.choice([1, 1, 1, 2, 3])):  # mostly one change: the rest of the body stays valid
        op = rng.randrange(5)
        if op == 0 and body:
            del body[rng.choice(list(body))]
        elif op == 1:  # a known field: edge numbers half of the time (the engine's ints overflowed there)
            body[rng.choice(FIELDS)] = rng.choice(NUMBERS) if rng.random() < 0.5 else random_value(rng)
        elif op == 2:
            body[f"unknown_{rng.randrange(100)}"] = random_value(rng)
        elif op == 3 and isinstance(body.get("messages"), list) and body["messages"]:
            message = rng.choice(body["messages"])
            if isinstance(message, dict):
                message[rng.choice(["role", "content", "name", "reasoning_content", "tool_calls"])] = random_value(rng)
        else:
            body["speculative"] = {"n_max": rng.choice(NUMBERS)}
    return body


def raw_mutation(rng: random.Random, data: bytes) -> bytes:
    op = rng.randrange(7)
    if op == 0:
        return data[:rng.randrange(len(data))]
    if op == 1:
        at = rng.randrange(len(data))
        return data[:at] + bytes([rng.choice([0xff, 0xc3, 0x80, 0xed, 0x00])]) + data[at:]
    if op == 2:  # a number replaced by a literal JSON does not allow
        return data.replace(b": 2", b": " + rng.choice(SPECIAL).encode(), 1).replace(b": 0", b": NaN", 1)
    if op == 3:
        return b"\xef\xbb\xbf" + data
    if op == 4:
        return rng.choice([b"", b"null", b"[]", b"\"x\"", b"[" * 100_000, b"{" * 1000, b'{"prompt": "\\ud800"}'])
    if op == 5:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    return data.replace(b'"Hi there"', b'"Hi \\ud83d there"').replace(b'"Hello world"', b'"\\udc00"')


def cases(rng: random.Random):
    for i in range(CASES):
        path = "/v1/completions" if i % 2 else "/v1/chat/completions"
        body = mutate(rng, BASES[path]) if rng.random() < 0.9 else BASES[path]
        try:
            data = json.dumps(body).encode()
        except ValueError:  # NaN from random_value's floats cannot happen, but keep the fuzz total
            continue
        yield path, raw_mutation(rng, data) if rng.random() < 0.2 else data


def check(status: int, raw: bytes, what: str) -> None:
    assert status == 200 or 400 <= status < 500, f"{what}: HTTP {status} {raw[:300]!r}"
    if status != 200:
        out = json.loads(raw)
        assert set(out) == {"error"} and out["error"]["code"] == status, what
        assert isinstance(out["error"]["message"], str) and out["error"]["message"], what
        assert isinstance(out["error"]["type"], str), what
    elif raw.startswith(b"data: "):  # a stream
        events = [line for line in raw.split(b"\n") if line.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]", f"{what}: {raw[-300:]!r}"
        assert not any(b'"error"' in e for e in events), what
    else:
        assert "choices" in json.loads(raw), what


@pytest.fixture(scope="module")
def server(checkpoints, tmp_path_factory):
    gguf: Path = checkpoints.convert(checkpoints.make("server-no-nextn", "tiny", dtype="f32", nextn=False),
                                     outtype="f32")
    server = Server(gguf, tmp_path_factory.mktemp("fuzz") / "server.log", "--max-body-mib", "1", "-np", "2",
                    n_ctx=2 * N_CTX)  # the slots share -c: N_CTX each
    yield server
    server.stop()


def test_fuzzed_request_json_gets_4xx_or_200_never_500(server):
    proc = psutil.Process(server.proc.pid)
    rss_start = proc.memory_info().rss
    statuses: Counter[int] = Counter()

    def send(case: tuple[int, tuple[str, bytes]]) -> int:
        n, (path, data) = case
        status, raw = request(server, "POST", path, data, headers={"Content-Type": "application/json"})
        check(status, raw, f"case {n} {path} {data[:200]!r}")
        return status

    with ThreadPoolExecutor(4) as pool:  # two slots busy, two requests being parsed or refused
        statuses.update(pool.map(send, enumerate(cases(random.Random(SEED)))))
    status, raw = get(server, "/health")
    assert status == 200 and json.loads(raw)["slots_idle"] == 2
    rss_end = proc.memory_info().rss
    print(f"\nfuzz: {sum(statuses.values())} cases, statuses {dict(sorted(statuses.items()))}; server RSS "
          f"{rss_start / MIB:.0f} MiB at start, {rss_end / MIB:.0f} MiB after")
    assert statuses[200] > 20 and sum(v for k, v in statuses.items() if k != 200) > CASES // 2
    assert rss_end - rss_start < 200 * MIB
    log = server.log.read_text()
    assert "Traceback" not in log and " 500 " not in log
