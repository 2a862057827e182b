"""Structured output and logit_bias through the server (issue 13 item 3; docs/server-fields.md rows
response_format, json_schema, grammar, logit_bias): OpenAI's and llama-server's shapes, through the openai client
and raw HTTP, on the bundled model with draft-MTP (the server's default for a file with a NextN layer)."""
from __future__ import annotations

import json
import math

import jsonschema
import pytest

from conftest import ROOT
from live_server import Server, post_json

BUNDLED = ROOT / "models" / "glm5next-small"
PROMPT = "config = "
SCHEMA = {"type": "object", "properties": {"level": {"enum": ["debug", "info", "error"]},
                                           "code": {"type": "integer", "minimum": 0, "maximum": 999}},
          "required": ["level", "code"], "additionalProperties": False}
MESSAGES = [{"role": "user", "content": "Write the log level and code as JSON"}]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    from glm5next_convert import convert
    return convert(BUNDLED, tmp_path_factory.mktemp("structured") / "glm5next-small-f16.gguf", outtype="f16",
                   progress=False, log=lambda m: None)


@pytest.fixture(scope="module")
def model(gguf):
    from glm5next_runtime import Model
    return Model(gguf, n_ctx=1024, n_threads=1, spec_type="draft-mtp", draft_n_max=3)


@pytest.fixture(scope="module")
def server(gguf, tmp_path_factory):
    server = Server(gguf, tmp_path_factory.mktemp("structured") / "server.log", n_ctx=1024)
    yield server
    server.stop()


def complete(server, **fields) -> tuple[int, dict]:
    return post_json(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 96, "temperature": 0} | fields)


def test_response_format_json_object_and_json_schema_give_valid_json(server, model):
    client = server.client()
    out = client.completions.create(model="m", prompt=PROMPT, max_tokens=96, temperature=0,
                                    extra_body={"response_format": {"type": "json_object"}})
    assert isinstance(json.loads(out.choices[0].text), dict)
    fmt = {"type": "json_schema", "json_schema": {"name": "log", "schema": SCHEMA, "strict": True}}
    chat = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=96, temperature=0,
                                          response_format=fmt)
    jsonschema.validate(json.loads(chat.choices[0].message.content), SCHEMA)
    assert chat.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=96, temperature=0,
                                              response_format=fmt, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == chat.choices[0].message.content
    status, raw = complete(server, response_format=fmt)
    want = model.generate(PROMPT, max_tokens=96, temperature=0, json_schema=SCHEMA).text
    assert status == 200 and raw["choices"][0]["text"] == want


def test_llama_server_json_schema_and_grammar_fields(server, model):
    status, out = complete(server, json_schema=SCHEMA)
    assert status == 200 and out["choices"][0]["text"] == model.generate(PROMPT, max_tokens=96, temperature=0,
                                                                          json_schema=SCHEMA).text
    status, native = post_json(server, "/completion", {"prompt": PROMPT, "n_predict": 16, "temperature": 0,
                                                       "grammar": 'root ::= "yes" | "no"'})
    assert status == 200 and native["content"] in ("yes", "no")
    status, out = complete(server, grammar='root ::= [a-z]{1,8} "=" [0-9]{1,3}')
    assert status == 200 and out["choices"][0]["text"] == model.generate(
        PROMPT, max_tokens=96, temperature=0, grammar='root ::= [a-z]{1,8} "=" [0-9]{1,3}').text


def test_a_schema_is_read_as_llama_server_reads_it(server, model):
    """llama-server's converter reads draft-04's tuple `items` (a list of schemas) as exactly those items, and
    `items` without a `type` as an array; JSON Schema 2020-12 (llguidance's) would let any value through."""
    tuple_items = {"items": [{"type": "integer"}, {"type": "string"}]}
    status, out = complete(server, response_format={"type": "json_object", "schema": tuple_items}, max_tokens=32)
    want = model.generate(PROMPT, max_tokens=32, temperature=0, json_schema={
        "type": "array", "prefixItems": tuple_items["items"], "items": False, "minItems": 2})
    assert status == 200 and out["choices"][0]["text"] == want.text
    assert want.text.startswith("[") and want.text != model.generate(PROMPT, max_tokens=32, temperature=0,
                                                                     json_schema=tuple_items).text


def test_logit_bias_in_every_form_is_the_python_apis(server, model):
    plain = model.generate(PROMPT, max_tokens=12, temperature=0)
    token = plain.tokens[1]
    text = model.detokenize([token])
    word = model.tokenize(" banana", parse_special=False)
    forms = [  # request value -> Model.generate's logit_bias
        ({str(token): False}, [(token, -math.inf)]),
        ({str(token): -100}, [(token, -100.0)]),
        ([[token, False]], [(token, -math.inf)]),
        ([[text, False]], [(t, -math.inf) for t in model.tokenize(text, parse_special=False)]),
        ({" banana": 5.5}, [(t, 5.5) for t in word]),
    ]
    for value, bias in forms:
        status, out = complete(server, max_tokens=12, logit_bias=value)
        want = model.generate(PROMPT, max_tokens=12, temperature=0, logit_bias=bias).text
        assert status == 200 and out["choices"][0]["text"] == want != plain.text, value
    chat = server.client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=4, temperature=0,
                                                   logit_bias={str(word[0]): 100}, reasoning_effort="none")
    assert chat.choices[0].message.content.startswith(model.detokenize(word[:1]) * 2)


BAD = [  # fields -> the start of the 400's message
    ({"grammar": "root ::= ("}, "grammar: "),
    ({"grammar": 'root ::= "a" foo'}, "grammar: "),
    ({"json_schema": {"type": "nonsense"}}, "json_schema: "),
    ({"response_format": {"type": "xml"}}, "response_format.type: "),
    ({"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}, "response_format, grammar: "),
    ({"json_schema": {}, "grammar": 'root ::= "a"'}, "json_schema, grammar: "),
    ({"logit_bias": {"5": True}}, "logit_bias: "),
    ({"logit_bias": [[5]]}, "logit_bias: "),
    ({"logit_bias": {"99999": 1}}, "logit_bias: token 99999 is outside the vocabulary"),
]


@pytest.mark.parametrize("fields, message", BAD, ids=[str(f)[:40] for f, _ in BAD])
def test_structured_output_errors_are_a_400_naming_the_field(server, fields, message):
    status, out = complete(server, **fields)
    assert status == 400 and out["error"]["message"].startswith(message), out


def test_a_grammar_turns_thinking_off_and_refuses_a_forced_think_block(server):
    status, out = post_json(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 96,
                                                             "temperature": 0, "json_schema": SCHEMA})
    assert status == 200 and json.loads(out["choices"][0]["message"]["content"])
    assert not out["choices"][0]["message"].get("reasoning_content")
    status, out = post_json(server, "/v1/chat/completions", {"messages": MESSAGES, "json_schema": SCHEMA,
                                                             "chat_template_kwargs": {"enable_thinking": True}})
    assert status == 400 and out["error"]["message"].startswith("json_schema: the prompt opens a think block")


def test_values_that_ask_for_nothing_change_nothing(server):
    status, want = complete(server, max_tokens=8)
    for fields in ({"response_format": {"type": "text"}}, {"logit_bias": {}}, {"logit_bias": []}, {"grammar": ""},
                   {"json_schema": None}, {"grammar_lazy": False}):
        status_with, got = complete(server, max_tokens=8, **fields)
        assert status == status_with == 200 and got["choices"] == want["choices"], fields
