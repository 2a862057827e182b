"""Forcing tool calls with a grammar (issue 13 item 4: tool_choice "required" or a named function): on the bundled
model, with draft-MTP, the reply is GLM's call markup that tool_calls.py reads back into calls of the asked
function whose arguments follow its parameters' schema, and the same with speculation off (greedy)."""
from __future__ import annotations

import jsonschema
import pytest

from conftest import ROOT
from glm5next_runtime.generate import end_of_generation_ids
from glm5next_runtime.grammar import Grammar
from glm5next_runtime.tool_calls import argument_schemas, split_tool_calls
from glm5next_runtime.tool_grammar import tool_call_grammar

BUNDLED = ROOT / "models" / "glm5next-small"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                            "unit": {"type": "string", "enum": ["c", "f"]}},
           "required": ["city", "days"]}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 10}}, "required": ["tz"]}
# the schema kinds whose values are text although not plainly "string" (tool_calls.read_argument)
NOTE = {"type": "object", "properties": {"text": {"type": ["string", "null"], "maxLength": 12},
                                         "tag": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
                                         "level": {"enum": [1, 2, "auto"]}},
        "required": ["text", "tag", "level"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
         {"type": "function", "function": {"name": "note", "parameters": NOTE}}]
PROMPTS = ["[gMASK]<sop><|user|>\nWhat is the weather in Paris?<|assistant|>\n", "def main():\n    "]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from glm5next_convert import convert
    from glm5next_runtime import Model
    gguf = convert(BUNDLED, tmp_path_factory.mktemp("tools") / "glm5next-small-f16.gguf", outtype="f16",
                   progress=False, log=lambda m: None)
    # a grammar leaves few tokens to choose from: before verify rows were batch-invariant (tests/csrc/test_batch_invariance.py),
    # a verify row's rounding broke a near-tie of the get_weather call differently from plain decoding's
    return Model(gguf, n_ctx=1024, n_threads=1, spec_type="draft-mtp", draft_n_max=3)


@pytest.mark.parametrize("name", [None, "get_weather", "get_time", "note"])
def test_a_forced_call_is_glms_markup_of_the_asked_function(model, name):
    grammar = Grammar.from_gbnf(model.tokenizer, end_of_generation_ids(model.tokenizer),
                                tool_call_grammar(TOOLS, name, parallel=False))
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for prompt in PROMPTS:
        spec = model.generate(prompt, max_tokens=96, temperature=0, grammar=grammar, spec_n_max=3, special=True)
        plain = model.generate(prompt, max_tokens=96, temperature=0, grammar=grammar, spec_n_max=0, special=True)
        assert spec.finish_reason == "stop" and spec.tokens == plain.tokens
        content, calls = split_tool_calls(spec.text, argument_schemas(TOOLS))
        assert content == "" and len(calls) == 1, spec.text
        assert name in (None, calls[0].name)
        jsonschema.validate(calls[0].arguments, schemas[calls[0].name])


def test_parallel_calls_are_allowed_and_an_unknown_function_is_refused():
    assert tool_call_grammar(TOOLS).startswith('start: call ("\\n"? call)*')
    with pytest.raises(ValueError, match="tool_choice: no function named 'nope'"):
        tool_call_grammar(TOOLS, "nope")
