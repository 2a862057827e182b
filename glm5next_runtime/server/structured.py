"""Structured output and logit bias of a request, as Model.generate takes them: OpenAI's `response_format` and
`logit_bias`, llama-server's `json_schema` and `grammar` (GBNF), and chat's `tool_choice` "required" or a named
function (a grammar of GLM's call markup, ../tool_grammar.py) (docs/server-fields.md).

The grammar is compiled here, before the request waits for a slot: a grammar or schema that does not compile is a
400 naming its field at once. At most one of response_format (json_object / json_schema), json_schema and grammar
may ask for a grammar (llama-server refuses json_schema with grammar too).
"""
from __future__ import annotations

import math
import re
from typing import Any

from ..generate import end_of_generation_ids
from ..grammar import Grammar, GrammarError
from ..tokenizer import Tokenizer
from ..tool_grammar import tool_call_grammar
from .errors import APIError
from .schemas import ChatRequest, GenerationRequest

DECIMAL = re.compile(r"-?[0-9]+")  # llama-server's strtol test: a key that is all digits is a token id
OBJECT_SCHEMA = {"type": "object"}  # what json_object asks for without a schema (OpenAI: a JSON object)


def structured_kwargs(body: GenerationRequest, tokenizer: Tokenizer) -> dict[str, Any]:
    """Model.generate's grammar and logit_bias for `body` (only those it asks for): ignore_eos adds a -inf bias for
    each end-of-generation token after the request's own, as llama-server appends its logit_bias_eog. Raises
    APIError(400) naming the field for a grammar or schema that does not compile, two fields that both ask for a
    grammar, and a logit_bias token outside the vocabulary."""
    out: dict[str, Any] = {}
    grammar = _grammar(body, tokenizer)
    if grammar is not None:
        out["grammar"] = grammar
    bias = logit_bias(body.logit_bias, tokenizer) if body.logit_bias else []
    if body.ignore_eos:
        bias += [(token, -math.inf) for token in end_of_generation_ids(tokenizer)]
    if bias:
        out["logit_bias"] = bias
    return out


def _grammar(body: GenerationRequest, tokenizer: Tokenizer) -> Grammar | None:
    asks: list[tuple[str, Any]] = []  # (field, schema) or ("grammar", GBNF text)
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        asks.append(("response_format", OBJECT_SCHEMA if fmt.schema_ is None else fmt.schema_))
    elif fmt is not None and fmt.type == "json_schema":
        spec = fmt.json_schema
        asks.append(("response_format", {} if spec is None or spec.schema_ is None else spec.schema_))
    if body.json_schema is not None:
        asks.append(("json_schema", body.json_schema))
    if body.grammar:
        asks.append(("grammar", body.grammar))
    if isinstance(body, ChatRequest) and (forced := body.forced_tool())[0]:  # the reply is calls: GLM's markup
        asks.append(("tool_choice", tool_call_grammar(body.active_tools(), forced[1], body.parallel_tool_calls)))
    if len(asks) > 1:
        raise APIError(400, f"{asks[0][0]}, {asks[1][0]}: both ask for a grammar; send one of them")
    if not asks:
        return None
    field, what = asks[0]
    end_ids = end_of_generation_ids(tokenizer)
    try:
        if field in ("grammar", "tool_choice"):
            return Grammar.from_gbnf(tokenizer, end_ids, what, field)
        return Grammar.from_json_schema(tokenizer, end_ids, llama_schema(what), field)
    except GrammarError as e:
        raise APIError(400, str(e)) from None


VALUE_KEYWORDS = ("const", "enum", "default", "examples")  # their values are JSON data, not schemas
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema


def llama_schema(schema: Any) -> Any:
    """A request's JSON schema as llama-server's converter reads it (common/json-schema-to-grammar.cpp), for
    llguidance, which follows JSON Schema 2020-12: draft-04's tuple form, `items` given as a list of schemas, is
    exactly those items (prefixItems, no more), and a schema without a `type` that has `items` or `prefixItems` is
    an array (2020-12 would let any non-array value through)."""
    if isinstance(schema, list):
        return [llama_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in VALUE_KEYWORDS else {name: llama_schema(sub) for name, sub in v.items()}
           if k in SCHEMA_MAPS and isinstance(v, dict) else llama_schema(v) for k, v in schema.items()}
    if isinstance(out.get("items"), list):
        tuple_items = out.pop("items")
        out |= {"prefixItems": tuple_items, "items": False, "minItems": len(tuple_items)}
    if "type" not in out and ("items" in out or "prefixItems" in out):
        out["type"] = "array"
    return out


def logit_bias(pairs: list[tuple[int | str, float | bool]], tokenizer: Tokenizer) -> list[tuple[int, float]]:
    """(token id, bias) pairs of a request's logit_bias (schemas.logit_bias_pairs), llama-server's reading: a
    token is an id, a text of digits (OpenAI's object keys) or another text, each of whose tokens gets the bias; a
    bias is a number (no bound, as llama-server; OpenAI's is [-100, 100]) or false, which bans the token (-inf).
    Raises APIError(400) for a token id outside the vocabulary (llama-server drops it silently)."""
    out: list[tuple[int, float]] = []
    for key, bias in pairs:
        value = -math.inf if bias is False else float(bias)
        if isinstance(key, int) or DECIMAL.fullmatch(key):
            ids = [int(key)]
        else:
            ids = tokenizer.encode(key, parse_special=False)
        for token in ids:
            if not 0 <= token < tokenizer.n_vocab:
                raise APIError(400, f"logit_bias: token {token} is outside the vocabulary [0, {tokenizer.n_vocab})")
            out.append((token, value))
    return out
