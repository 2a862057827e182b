"""A grammar that forces tool calls in GLM's markup (tool_calls.py), for what OpenAI's tool_choice "required" or a
named function asks (issue 13 item 4): the reply is one or more calls and nothing else.

It is Lark for llguidance (grammar.Grammar.from_gbnf takes it). A call is `<tool_call>NAME`, then the function's
parameters in its schema's order (a required one always, an optional one may be left out) as
`<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>`, then `</tool_call>`, with the optional newlines GLM-4.5 writes
between the parts. A VALUE follows the parameter's JSON schema as tool_calls.read_argument reads it back: one of an
`enum`'s members, the text itself for a parameter that admits a string (ended by `</arg_value>`, at most its
maxLength characters), JSON of the schema for any other (the templates write `v | tojson` unless v is a string).
`<tool_call>` and the other tags are text to llguidance (GLM's files mark them user-defined, not control), so the
model may write them as its single tokens.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .tool_calls import schema_members, schema_types

NL = '"\\n"?'  # an optional newline between the parts


def tool_call_grammar(tools: Sequence[Mapping[str, Any]], name: str | None = None, parallel: bool = True) -> str:
    """Lark text forcing calls of `tools` (OpenAI's list: {"type": "function", "function": {"name", "parameters"}}),
    only of the function `name` when given; one call, or with `parallel` one or more. Raises ValueError for a
    `name` that is not among the tools, or no tools."""
    functions = [t.get("function") or {} for t in tools]
    if name is not None:
        functions = [f for f in functions if f.get("name") == name]
        if not functions:
            raise ValueError(f"tool_choice: no function named {name!r} among the tools")
    if not functions:
        raise ValueError("tools: no function to call")
    rules = ["start: call" + (f" ({NL} call)*" if parallel else ""),
             "call: " + " | ".join(f"call_{i}" for i in range(len(functions)))]
    for i, fn in enumerate(functions):
        params = fn.get("parameters") or {}
        required = set(params.get("required") or ())
        args = []
        for j, (key, schema) in enumerate((params.get("properties") or {}).items()):
            rules.append(f'arg_{i}_{j}: "<arg_key>" {json.dumps(key)} "</arg_key>" {NL} "<arg_value>" '
                         f"{_value(f'value_{i}_{j}', schema, rules)} {NL}")
            args.append(f"arg_{i}_{j}" + ("" if key in required else "?"))
        rules.append(f'call_{i}: "<tool_call>" {json.dumps(fn.get("name", ""))} {NL} {" ".join(args)} '
                     '"</tool_call>"')
    return "\n".join(rules) + "\n"


def _value(rule: str, schema: Any, rules: list[str]) -> str:
    """The grammar of one argument value up to and including its `</arg_value>` (a rule named `rule` added to
    `rules`); returns what the argument's rule writes for it. The value is written as tool_calls.read_argument reads
    it: an enum's members (a string as it is, any other as JSON), the text itself for a parameter that admits a
    string, JSON of the schema for any other."""
    schema = schema if isinstance(schema, Mapping) else {}
    if members := schema_members(schema):
        texts = [m if isinstance(m, str) else json.dumps(m) for m in members]
        rules.append(f"{rule}: " + " | ".join(json.dumps(t) for t in texts))
        return f'{rule} "</arg_value>"'
    if "string" in (schema_types(schema) or ()):
        limit = _max_length(schema)
        text = "(.|\\n)" + ("*" if not isinstance(limit, int) else f"{{0,{limit}}}")
        rules.append(f'{rule}[suffix="</arg_value>"]: /{text}/')
        return rule
    rules.append(f"{rule}: %json {json.dumps(dict(schema))}")
    return f'{rule} "</arg_value>"'


def _max_length(schema: Mapping[str, Any]) -> int | None:
    """The most characters a string value of `schema` has: its maxLength, or the largest of its string branches'
    (anyOf / oneOf); None when one of them says none."""
    branches = [b for key in ("anyOf", "oneOf") for b in schema.get(key) or [] if isinstance(b, Mapping)]
    strings = [b for b in branches if "string" in (schema_types(b) or ())]
    if not strings:
        limit = schema.get("maxLength")
        return limit if isinstance(limit, int) else None
    limits = [_max_length(b) for b in strings]
    return None if None in limits else max(limits)  # type: ignore[type-var]
