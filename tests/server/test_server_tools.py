"""Tools in a chat request through HTTP (server/tool_prompt.py): the prompt describes them (the template's own way
when it renders `tools`, GLM's description otherwise), the history's calls and results are rendered as GLM's
templates render them, and what cannot be done yet is a 400 naming the field. How replies are read back into
tool_calls is tests/runtime/test_tool_calls.py's (model-independent text)."""
from __future__ import annotations


import pytest

from live_server import Server, post_json

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
HISTORY = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": "", "tool_calls": [
               {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
NATIVE_TEMPLATE = ("{%- if tools -%}<|system|>TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}{%- endif -%}"
                   "{%- for m in messages -%}<|{{ m.role }}|>{{ m.content }}"
                   "{%- for c in m.tool_calls or [] -%}[{{ c.function.name }}:{{ c.function.arguments.city }}]"
                   "{%- endfor -%}{%- endfor -%}<|assistant|>")


@pytest.fixture(scope="module")
def server(predictable_gguf, tmp_path_factory):
    s = Server(predictable_gguf, tmp_path_factory.mktemp("tools") / "server.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def native(predictable_gguf, tmp_path_factory):
    d = tmp_path_factory.mktemp("tools-native")
    (d / "template.jinja").write_text(NATIVE_TEMPLATE)
    s = Server(predictable_gguf, d / "server.log", "--chat-template-file", str(d / "template.jinja"))
    yield s
    s.stop()


def prompt(server: Server, **body) -> str:
    status, out = post_json(server, "/apply-template", body)
    assert status == 200, out
    return out["prompt"]


def test_a_template_without_tools_gets_glms_description_and_markup(server):
    p = prompt(server, messages=HISTORY, tools=TOOLS)
    assert "# Tools" in p and '"name": "get_weather"' in p  # the description, in the system turn
    assert p.index("<|system|>") < p.index("# Tools") < p.index("<|user|>")
    assert ("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
            "<arg_value>2</arg_value></tool_call>") in p
    assert "<|observation|>\n<tool_response>sunny</tool_response>" in p


def test_a_template_that_renders_tools_gets_them_and_the_parsed_arguments(native):
    p = prompt(native, messages=HISTORY, tools=TOOLS)
    assert p.startswith("<|system|>TOOLS:get_weather;") and "[get_weather:Paris]" in p and "# Tools" not in p


def test_tool_choice_none_leaves_the_tools_out(server):
    assert "# Tools" not in prompt(server, messages=HISTORY[:1], tools=TOOLS, tool_choice="none")


def test_a_chat_with_tools_answers(server):
    status, out = post_json(server, "/v1/chat/completions", {"messages": HISTORY, "tools": TOOLS, "max_tokens": 4,
                                                             "temperature": 0})
    assert status == 200 and out["choices"][0]["finish_reason"] in ("length", "stop", "tool_calls")


@pytest.mark.parametrize("body,field", [
    ({"tool_choice": {"type": "function", "function": {"name": "missing"}}}, "tool_choice"),
    ({"tools": [], "tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
])
def test_what_tools_cannot_do_is_a_400_naming_the_field(server, body, field):
    status, out = post_json(server, "/v1/chat/completions", {"messages": HISTORY[:1], "tools": TOOLS, **body})
    assert status == 400 and field in out["error"]["message"]


def test_arguments_that_are_not_a_json_object_are_a_400_naming_the_message(server):
    bad = [HISTORY[0], HISTORY[1] | {"tool_calls": [{"type": "function",
                                                      "function": {"name": "get_weather", "arguments": "[1"}}]}]
    status, out = post_json(server, "/v1/chat/completions", {"messages": bad, "tools": TOOLS})
    assert status == 400 and "messages[1].tool_calls[0].function.arguments" in out["error"]["message"]


def test_tools_on_completions_are_refused(server):
    status, out = post_json(server, "/v1/completions", {"prompt": "x", "tools": TOOLS})
    assert status == 400 and "tools" in out["error"]["message"]
