"""Every request field has a fate (issue 13): honoured, ignored on purpose, or refused with a 400 naming it; the table
is docs/server-fields.md, and each of its rows has a test here or in test_server.py (a test checks the table against
the tests and the schema). Never a 200 that silently drops what the client asked for.

One server on the tiny file without a NextN layer (`plain_gguf`), driven by raw HTTP and the openai client; its
greedy text is compared with the Python API on the same file. A second server with --special starts only for the
test that needs it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from glm5next_runtime import Model
from glm5next_runtime.generate import end_of_generation_ids
from glm5next_runtime.server.openai_chat.schemas import CompletionRequest
from glm5next_runtime.server.schemas import ChatRequest
from glm5next_runtime.tokenizer import CONTROL
from live_server import N_CTX, Server, post_json

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "server-fields.md"
PROMPT = "def add(a, b):"
MESSAGES = [{"role": "user", "content": "Hi there"}]
RENDERED = "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think>"  # MESSAGES in the generated checkpoints' template
ENDPOINTS = ["/v1/completions", "/v1/chat/completions"]
SAMPLED = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


@pytest.fixture(scope="module")
def model(plain_gguf) -> Model:
    return Model(plain_gguf, n_ctx=N_CTX, n_threads=1)


@pytest.fixture(scope="module")
def server(plain_gguf, tmp_path_factory):
    server = Server(plain_gguf, tmp_path_factory.mktemp("fields") / "server.log")
    yield server
    server.stop()


def ask(server: Server, endpoint: str, **fields) -> tuple[int, dict]:
    """POST a greedy request for the prompt (or the chat) with `fields` added."""
    body = {"prompt": PROMPT} if endpoint == "/v1/completions" else {"messages": MESSAGES}
    return post_json(server, endpoint, body | {"temperature": 0} | fields)


def text(out: dict) -> str:
    """The text of a /v1/completions response."""
    return out["choices"][0]["text"]


# ------------------------------------------------------------------------------------------ honoured

def test_any_model_name_is_echoed(server, plain_gguf):
    """Clients send their own model names: llama-server with one model answers them all and echoes the name."""
    client = server.client()
    assert client.completions.create(model="gpt-4", prompt=PROMPT, max_tokens=2).model == "gpt-4"
    assert client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=2).model == "gpt-4o"
    chunks = list(client.chat.completions.create(model="org/any:name", messages=MESSAGES, max_tokens=2, stream=True))
    assert {c.model for c in chunks} == {"org/any:name"}
    status, out = ask(server, "/v1/completions", max_tokens=2)
    assert status == 200 and out["model"] == plain_gguf.name  # no name: the served one
    assert [m.id for m in client.models.list()] == [plain_gguf.name]


LIMITS = [  # fields -> the limit they set (None: none but the end of generation or the context)
    ({"max_tokens": 5}, 5),
    ({"max_completion_tokens": 5}, 5),
    ({"n_predict": 5}, 5),
    ({"n_predict": 3, "max_completion_tokens": 4, "max_tokens": 6}, 3),  # llama-server's order
    ({"max_completion_tokens": 4, "max_tokens": 6}, 4),
    ({"n_predict": -1, "max_tokens": 2}, None),  # -1: no limit, whatever the others say
    ({"max_tokens": -1}, None),  # what llama.cpp's web UI sends (llama-server: max_tokens is n_predict's alias)
    ({"n_predict": 0}, 0),
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("fields, limit", LIMITS, ids=[str(f) for f, _ in LIMITS])
def test_every_name_of_the_token_limit_limits(server, model, endpoint, fields, limit):
    full = model.generate(PROMPT if endpoint == ENDPOINTS[0] else RENDERED, max_tokens=N_CTX, temperature=0)
    assert full.finish_reason == "stop" and 6 < len(full.tokens) < 100  # every limit cuts it; none ends early
    status, out = ask(server, endpoint, **fields)
    assert status == 200, out
    assert out["usage"]["completion_tokens"] == (len(full.tokens) if limit is None else limit)
    assert out["choices"][0]["finish_reason"] == ("stop" if limit is None else "length")
    if endpoint == ENDPOINTS[0]:
        want = full if limit is None else model.generate(PROMPT, max_tokens=limit, temperature=0)
        assert text(out) == want.text


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_stream_usage_comes_last_and_only_when_asked(server, endpoint):
    client = server.client()
    create = client.completions.create if endpoint == "completions" else client.chat.completions.create
    kwargs = dict(prompt=PROMPT) if endpoint == "completions" else dict(messages=MESSAGES)
    kwargs |= dict(model="m", max_tokens=5, temperature=0, stream=True)

    *chunks, last = list(create(stream_options={"include_usage": True}, **kwargs))
    assert last.choices == [] and last.usage.completion_tokens == 5
    assert last.usage.total_tokens == last.usage.prompt_tokens + 5 > 5
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length" and "timings" not in chunks[-1].model_extra
    assert last.model_extra["timings"]["predicted_n"] == 5  # llama-server: the timings ride on the last chunk

    plain = list(create(**kwargs))
    assert all(c.usage is None and c.choices for c in plain)
    assert plain[-1].choices[0].finish_reason == "length" and plain[-1].model_extra["timings"]["predicted_n"] == 5


@pytest.mark.parametrize("field, value", [("temperature", 0.3), ("top_k", 2), ("top_p", 0.3), ("min_p", 0.5),
                                          ("seed", 7)])
def test_sampler_fields_reach_the_sampler(server, model, field, value):
    settings = dict(SAMPLED, seed=1)
    want = model.generate(PROMPT, max_tokens=16, **(settings | {field: value})).text
    assert want != model.generate(PROMPT, max_tokens=16, **settings).text  # the field changes the text
    status, out = post_json(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 16, **settings, field: value})
    assert status == 200 and text(out) == want


def test_reasoning_format_none_leaves_the_reasoning_in_content(server, model):
    want = model.generate(RENDERED, max_tokens=12, temperature=0).text
    status, out = ask(server, "/v1/chat/completions", max_tokens=12, reasoning_format="none")
    assert status == 200 and out["choices"][0]["message"] == {"role": "assistant", "content": want}
    status, split = ask(server, "/v1/chat/completions", max_tokens=12)
    assert status == 200 and split["choices"][0]["message"]["reasoning_content"] == want  # no </think> yet


def test_reasoning_effort_none_turns_thinking_off(server, model):
    want = model.generate(RENDERED + "</think>\n", max_tokens=12, temperature=0).text
    status, out = ask(server, "/v1/chat/completions", max_tokens=12, reasoning_effort="none")
    assert status == 200 and out["choices"][0]["message"] == {"role": "assistant", "content": want}
    # chat_template_kwargs win over it, and another effort keeps the template's default (thinking)
    status, out = ask(server, "/v1/chat/completions", max_tokens=12, reasoning_effort="none",
                      chat_template_kwargs={"enable_thinking": True})
    assert status == 200 and "reasoning_content" in out["choices"][0]["message"]
    status, out = ask(server, "/v1/chat/completions", max_tokens=12, reasoning_effort="high")
    assert status == 200 and "reasoning_content" in out["choices"][0]["message"]


# ------------------------------------------------------------------------------------------ control tokens

def shown_controls(model: Model, ids: list[int]) -> list[str]:
    """The texts of the control tokens among `ids` that do not end a generation."""
    tok = model.tokenizer
    ends = set(end_of_generation_ids(tok))
    return [tok.tokens[i] for i in ids if tok.token_types[i] == CONTROL and i not in ends]


@pytest.fixture(scope="module")
def control_seed(model) -> int:
    """A seed whose sampled continuation of PROMPT (32 tokens) holds control tokens, as random weights write them."""
    for seed in range(50):
        if shown_controls(model, model.generate(PROMPT, max_tokens=32, seed=seed, **SAMPLED).tokens):
            return seed
    pytest.fail("no seed in 0..49 samples a control token")


def test_generated_control_tokens_are_not_text(server, model, control_seed):
    hidden = model.generate(PROMPT, max_tokens=32, seed=control_seed, **SAMPLED)
    shown = model.generate(PROMPT, max_tokens=32, seed=control_seed, special=True, **SAMPLED)
    controls = shown_controls(model, hidden.tokens)
    assert hidden.tokens == shown.tokens and all(c in shown.text for c in controls)
    assert not any(c in hidden.text for c in controls)
    status, out = post_json(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 32, "seed": control_seed,
                                                        **SAMPLED})
    assert status == 200 and text(out) == hidden.text and out["usage"]["completion_tokens"] == len(hidden.tokens)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_n_choices_are_the_requests_with_the_seed_plus_i(server, endpoint):
    """llama-server's n (n_cmpl): choice i is the request with seed + i; the usage counts the prompt once."""
    singles = [ask(server, endpoint, max_tokens=6, **SAMPLED, seed=7 + i)[1] for i in range(3)]
    assert len({json.dumps(one["choices"][0]) for one in singles}) > 1  # the seeds give different texts
    for field in ("n", "n_cmpl"):
        status, out = ask(server, endpoint, max_tokens=6, **SAMPLED, seed=7, **{field: 3})
        assert status == 200, out
        assert out["choices"] == [one["choices"][0] | {"index": i} for i, one in enumerate(singles)]
        usage = out["usage"]
        assert usage["prompt_tokens"] == singles[0]["usage"]["prompt_tokens"]
        assert usage["completion_tokens"] == sum(one["usage"]["completion_tokens"] for one in singles)


def test_several_prompts_are_one_choice_each(server):
    """OpenAI's list of prompts (texts, or lists of ids): one choice per prompt, in order, each the prompt's own
    completion, n of them per prompt with n."""
    prompts = [PROMPT, "Once upon a time"]
    singles = [post_json(server, "/v1/completions", {"prompt": p, "max_tokens": 5, "temperature": 0})[1]
               for p in prompts]
    status, out = post_json(server, "/v1/completions", {"prompt": prompts, "max_tokens": 5, "temperature": 0})
    assert status == 200 and [c["text"] for c in out["choices"]] == [text(one) for one in singles]
    assert out["usage"]["prompt_tokens"] == sum(one["usage"]["prompt_tokens"] for one in singles)
    _, ids = post_json(server, "/tokenize", {"content": PROMPT, "add_special": True})
    status, out = post_json(server, "/v1/completions", {"prompt": [ids["tokens"]] * 2, "n": 2, "max_tokens": 5,
                                                        "temperature": 0})
    assert status == 200 and [c["text"] for c in out["choices"]] == [text(singles[0])] * 4
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_verbose_adds_the_native_body(server, endpoint):
    status, plain = ask(server, endpoint, max_tokens=4)
    status_with, out = ask(server, endpoint, max_tokens=4, verbose=True)
    assert status == status_with == 200 and "__verbose" not in plain
    native = out.pop("__verbose")
    assert out["choices"] == plain["choices"]
    assert native["prompt"] == (RENDERED if endpoint == ENDPOINTS[1] else PROMPT)
    assert native["tokens_predicted"] == 4 and native["stop_type"] == "limit" and native["stop"] is True
    assert native["generation_settings"]["n_predict"] == 4


def test_special_flag_shows_control_tokens(plain_gguf, model, control_seed, tmp_path):
    shown = model.generate(PROMPT, max_tokens=32, seed=control_seed, special=True, **SAMPLED)
    server = Server(plain_gguf, tmp_path / "server.log", "--special", "--no-jinja")
    try:
        status, out = post_json(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 32,
                                                            "seed": control_seed, **SAMPLED})
    finally:
        server.stop()
    assert status == 200 and text(out) == shown.text


# ------------------------------------------------------------------------------------------ refused

REFUSED = [
    ("functions", [{"name": "f"}]),
    ("function_call", {"name": "f"}), ("presence_penalty", 0.5),
    ("frequency_penalty", -0.5), ("echo", True), ("best_of", 2), ("suffix", "return a + b"),
    ("audio", {"voice": "alloy", "format": "wav"}), ("modalities", ["text", "audio"]), ("web_search_options", {}),
    ("verbosity", "low"),
    ("grammar_lazy", True),
    ("samplers", ["top_k", "temperature"]), ("dynatemp_range", 0.5), ("top_n_sigma", 1.0), ("typical_p", 0.9),
    ("xtc_probability", 0.5), ("repeat_penalty", 1.1), ("dry_multiplier", 0.8), ("mirostat", 2), ("min_keep", 5),
    ("n_indent", 4), ("t_max_predict_ms", 1000),
    ("return_tokens", True), ("response_fields", ["content"]),
    ("lora", [{"id": 0, "scale": 1.0}]),
]
# the values that ask for nothing: accepted, and the output is the one without them
NEUTRAL = {"functions": [], "function_call": "none", "presence_penalty": 0,
           "frequency_penalty": 0.0, "echo": False, "best_of": 1, "suffix": "", "audio": None, "modalities": ["text"],
           "web_search_options": None, "verbosity": "medium",
           "grammar_lazy": False, "samplers": None, "dynatemp_range": 0.0, "top_n_sigma": -1.0,
           "typical_p": 1.0, "xtc_probability": 0.0, "repeat_penalty": 1.0, "dry_multiplier": 0.0, "mirostat": 0,
           "min_keep": 0, "n_indent": 0, "t_max_predict_ms": 0,
           "return_tokens": False, "response_fields": [], "lora": []}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("field, value", REFUSED, ids=[f"{f}={v!r}"[:40] for f, v in REFUSED])
def test_what_the_server_cannot_do_yet_is_a_400_naming_the_field(server, endpoint, field, value):
    status, out = ask(server, endpoint, max_tokens=2, **{field: value})
    assert status == 400 and out["error"]["type"] == "invalid_request_error"
    assert out["error"]["message"].startswith(f"{field}: ")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_values_that_ask_for_nothing_pass(server, endpoint):
    assert set(NEUTRAL) == {f for f, _ in REFUSED}
    status, want = ask(server, endpoint, max_tokens=4)
    status_with, got = ask(server, endpoint, max_tokens=4, **NEUTRAL)
    assert status == status_with == 200 and got["choices"] == want["choices"]


def refused_fields(cls: type) -> set[str]:
    """The fields `cls` declares with schemas.refused()."""
    return {name for name, info in cls.model_fields.items()
            if any(getattr(getattr(m, "func", None), "__qualname__", "").startswith("refused.") for m in info.metadata)}


# refused on /v1/completions only: chat completions honours them
REFUSED_ON_COMPLETIONS = [("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
                          ("tool_choice", "required")]


@pytest.mark.parametrize("field, value", REFUSED_ON_COMPLETIONS, ids=[f for f, _ in REFUSED_ON_COMPLETIONS])
def test_chat_only_fields_are_a_400_on_completions(server, field, value):
    status, out = ask(server, "/v1/completions", max_tokens=2, **{field: value})
    assert status == 400 and out["error"]["message"].startswith(f"{field}: ")


def test_the_schema_refuses_exactly_the_tested_fields():
    refused = {f for f, _ in REFUSED}
    assert refused_fields(ChatRequest) == refused
    assert refused_fields(CompletionRequest) == refused | {f for f, _ in REFUSED_ON_COMPLETIONS}


# ------------------------------------------------------------------------------------------ ignored on purpose

IGNORED = [
    ("user", "user-1"), ("metadata", {"k": "v"}), ("store", True), ("service_tier", "flex"),
    ("safety_identifier", "hash"), ("prompt_cache_key", "key"), ("prompt_cache_retention", "24h"),
    ("prediction", {"type": "content", "content": "return a + b"}),
    ("timings_per_token", True), ("n_keep", 10), ("n_discard", 5), ("n_cache_reuse", 256),
    ("speculative.n_min", 2), ("speculative.p_min", 0.5), ("speculative.type", "ngram-simple"),
    ("backend_sampling", True), ("dynatemp_exponent", 2.0), ("repeat_last_n", 128), ("mirostat_tau", 3.0),
    ("mirostat_eta", 0.2), ("dry_base", 2.0), ("dry_allowed_length", 3), ("dry_penalty_last_n", 128),
    ("dry_sequence_breakers", ["\n"]), ("xtc_threshold", 0.2),
    ("grammar_triggers", [{"type": "word", "value": "<tool_call>"}]), ("preserved_tokens", ["<tool_call>"]),
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("field, value", IGNORED, ids=[f for f, _ in IGNORED])
def test_fields_ignored_on_purpose_change_nothing(server, endpoint, field, value):
    status, want = ask(server, endpoint, max_tokens=4)
    status_with, got = ask(server, endpoint, max_tokens=4, **{field: value})
    assert status == status_with == 200 and got["choices"] == want["choices"]


# ------------------------------------------------------------------------------------------ the table

def table_rows() -> list[tuple[str, str, str]]:
    """(field, fate, test) of each row of docs/server-fields.md: fate is honoured, ignored or refused."""
    rows = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and (m := re.fullmatch(r"`([^`]+)`", cells[0])):
            fate = cells[2].split()[0].strip("*:,").lower()
            rows.append((m.group(1), fate, cells[3].strip("`")))
    return rows


def test_every_row_of_the_table_has_a_test():
    rows = table_rows()
    fates = {field: fate for field, fate, _ in rows}
    assert len(fates) == len(rows) > 60  # one row per field
    assert {f for f, fate in fates.items() if fate == "refused"} == {f for f, _ in REFUSED}
    assert {f for f, fate in fates.items() if fate == "ignored"} == {f for f, _ in IGNORED}
    for field, fate, test in rows:
        assert fate in ("honoured", "ignored", "refused"), field
        path, _, name = test.partition("::")
        assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), (field, test)
