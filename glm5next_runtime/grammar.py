"""Grammar-constrained generation (structured output): a grammar compiled for a vocabulary, and the matcher that
turns it into token masks round by round, draft-MTP drafts included.

The engine is llguidance (PyPI `llguidance`, Rust; llama.cpp's optional grammar backend), chosen over xgrammar by
measurement on the bundled model's tokenizer (4096 tokens, JSON schema of 3 fields, 28 tokens): a mask takes a
median 28 us with llguidance and 4 us with xgrammar, both small beside a decode token (~2.5 ms at -t 2); but
xgrammar requires torch, transformers and triton (a default pip install pulls ~3 GB of CUDA wheels; its import
takes 2.5 s) while llguidance is one 3 MB wheel without dependencies (import 0.06 s), and the runtime has no torch.

Grammars come as JSON schemas (OpenAI's response_format, llama-server's json_schema) or as llama.cpp's GBNF
(llama-server's grammar; converted by llguidance to its Lark dialect, which is also taken as is). JSON output
allows llama.cpp's whitespace between tokens (json-schema-to-grammar's SPACE_RULE: one space, or one or two
newlines and up to 20 spaces or tabs), not unbounded whitespace: a model stuck on newlines would otherwise run to
max_tokens inside the object.

With draft-MTP, a round (Constraint.step) drafts under the grammar: each draft step gets the mask after the drafts
before it (a lookahead on a copy of the matcher), so every draft is one the grammar allows; the target verifies
the drafts with the same masks (_core.Generator.verify: disallowed logits -inf), and the matcher
consumes what was emitted. Drafting without the masks and cutting the drafts at the first one the grammar refuses
(also exact: verify samples the cut row as plain decoding would, or from the residual under spec_sampling
"rejection") accepted far fewer: on the bundled model with a JSON
schema of 6 records, 214 of 232 lost drafts were cut by the grammar (f16) and the mean accepted length was 1.36
(q8_0); drafted under the masks, 2.64 (2.75 without a grammar on the same prompt; scripts/bench_grammar.py).
"""
from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import llguidance
import numpy as np
from llguidance.numpy import fill_next_token_bitmask

from .tokenizer import CONTROL, Tokenizer

if TYPE_CHECKING:
    from . import _core

# llama.cpp's json-schema-to-grammar SPACE_RULE, as an llguidance whitespace regex
JSON_WHITESPACE = r"(?: |\n{1,2}[ \t]{0,20})?"


class GrammarError(ValueError):
    """A grammar or JSON schema that cannot be compiled; the message names the field and llguidance's reason."""


class _Vocabulary:
    """What llguidance's TokenizerWrapper reads of a tokenizer: every token's exact bytes, the control tokens (which
    grammar text never spells) and an encoder."""

    def __init__(self, tokenizer: Tokenizer, end_ids: Sequence[int]):
        self.eos_token_id = end_ids[0]
        self.bos_token_id = tokenizer.special_ids.get("bos")
        self.tokens = [tokenizer.token_to_piece(i, special=True) for i in range(tokenizer.n_vocab)]
        self.special_token_ids = [i for i, ty in enumerate(tokenizer.token_types) if ty == CONTROL]
        self._tokenizer = tokenizer

    def __call__(self, text: bytes | str) -> list[int]:
        return self._tokenizer.encode(text.decode("utf-8", "replace") if isinstance(text, bytes) else text,
                                      parse_special=False)


_vocabularies: weakref.WeakKeyDictionary[Tokenizer, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _llg_tokenizer(tokenizer: Tokenizer, end_ids: Sequence[int]) -> llguidance.LLTokenizer:
    """llguidance's view of `tokenizer`, built once per tokenizer (40 ms for 4096 tokens; it grows with the
    vocabulary)."""
    with _lock:
        if tokenizer not in _vocabularies:
            wrapper = llguidance.TokenizerWrapper(_Vocabulary(tokenizer, end_ids))
            _vocabularies[tokenizer] = llguidance.LLTokenizer(wrapper, n_vocab=tokenizer.n_vocab,
                                                              eos_token=list(end_ids))
        return _vocabularies[tokenizer]


class Grammar:
    """A grammar compiled for one vocabulary; `constraint()` makes the matcher of one generation.

    tokenizer: the model's; end_ids: the end-of-generation ids (generate.end_of_generation_ids), which the grammar
    allows once its text is complete. Build it with from_json_schema or from_gbnf."""

    def __init__(self, tokenizer: Tokenizer, end_ids: Sequence[int], llg_grammar: str, field: str):
        if not end_ids:
            raise GrammarError(f"{field}: the vocabulary has no end-of-generation token to end a grammar with")
        self.n_vocab = tokenizer.n_vocab
        self._tokenizer = _llg_tokenizer(tokenizer, end_ids)
        self._grammar = llg_grammar
        self.end_ids = frozenset(end_ids)
        error = llguidance.LLMatcher.validate_grammar(llg_grammar, self._tokenizer)
        if error:
            raise GrammarError(f"{field}: {error}")

    @classmethod
    def from_json_schema(cls, tokenizer: Tokenizer, end_ids: Sequence[int], schema: Mapping[str, Any] | str | bool,
                         field: str = "json_schema") -> Grammar:
        """JSON text valid under `schema` (a JSON schema as a dict, JSON text, or true: any JSON value). `field`
        names the request field in errors. Raises GrammarError for a schema llguidance cannot compile (it names
        the keyword)."""
        if schema is True:
            schema = {}
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise GrammarError(f"{field}: not JSON: {e}") from None
        if not isinstance(schema, Mapping):
            raise GrammarError(f"{field}: a JSON schema is an object (or true), got {type(schema).__name__}")
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(dict(schema),
                                                                    defaults={"whitespace_pattern": JSON_WHITESPACE})
        except ValueError as e:
            raise GrammarError(f"{field}: {e}") from None
        return cls(tokenizer, end_ids, grammar, field)

    @classmethod
    def from_gbnf(cls, tokenizer: Tokenizer, end_ids: Sequence[int], text: str, field: str = "grammar") -> Grammar:
        """Text in llama.cpp's GBNF (root rule `root`), or in llguidance's Lark dialect (root rule `start`).
        Raises GrammarError naming the problem (a syntax error, an undefined rule)."""
        try:
            grammar = llguidance.grammar_from("gbnf", text)
        except Exception as e:  # noqa: BLE001 - the converter raises bare Exceptions for undefined rules
            raise GrammarError(f"{field}: {e}") from None
        return cls(tokenizer, end_ids, grammar, field)

    def constraint(self) -> Constraint:
        """A fresh matcher at the start of the grammar."""
        return Constraint(self)


def constraint_for(tokenizer: Tokenizer, end_ids: Sequence[int], grammar: str | Grammar | None = None,
                   json_schema: Mapping[str, Any] | str | bool | None = None) -> Constraint | None:
    """The matcher of one generation under `grammar` (GBNF or Lark text, or a compiled Grammar) or `json_schema`
    (see Grammar.from_json_schema), ended by `end_ids` (generate.end_of_generation_ids); None when neither is
    given. Raises GrammarError for both, or for one that does not compile."""
    if grammar is not None and json_schema is not None:
        raise GrammarError("grammar and json_schema: give one of them, not both")
    if isinstance(grammar, Grammar):
        return grammar.constraint()
    if grammar is not None:
        return Grammar.from_gbnf(tokenizer, end_ids, grammar).constraint()
    if json_schema is not None:
        return Grammar.from_json_schema(tokenizer, end_ids, json_schema).constraint()
    return None


class Constraint:
    """The grammar's state during one generation: the masks of each round and the tokens consumed so far."""

    def __init__(self, grammar: Grammar):
        self._grammar = grammar
        self._matcher = llguidance.LLMatcher(grammar._tokenizer, grammar._grammar, log_level=0)
        self._check()
        self._masks = MaskRows((grammar.n_vocab + 31) // 32)  # reused round after round

    def start(self, generator: _core.Generator, prompt: list[int], cache_prompt: bool) -> int:
        """generator.start under the grammar: the first token, consumed."""
        first = generator.start(prompt, cache_prompt, self.mask())
        self.consume([first])
        return first

    def step(self, generator: _core.Generator, max_tokens: int) -> list[int]:
        """One round of `generator` under the grammar (generator.step's meaning): the draft head drafts under the
        grammar's mask after the drafts so far (a lookahead on a copy of the matcher), the target verifies the
        drafts with each row's mask, and the matcher consumes what was emitted. Drafting stops after an
        end-of-generation token (the generator's end_ids: nothing follows it)."""
        limit = generator.begin_draft(max_tokens)
        masks = self.round(drafting=limit > 0)
        while masks.n < limit:
            token = generator.draft_next(masks.draft_mask())
            if token < 0:
                break
            masks.drafted(token)
        emitted = generator.verify(masks.n, masks.verify_masks())
        self.consume(emitted)
        return emitted

    def round(self, drafting: bool) -> RoundMasks:
        """The masks of one round (Constraint.step's, or scheduler.py's for a round batched with other
        sequences'); `drafting`: the round may draft (its lookahead runs on a copy of the matcher)."""
        return RoundMasks(self._matcher.deep_copy() if drafting else self._matcher, self._masks)

    def mask(self) -> np.ndarray:
        """uint32 [ceil(n_vocab / 32)]: the tokens allowed next (bit t % 32 of word t / 32), for
        _core.Generator.start."""
        return self._masks.fill(self._matcher, 0).copy()

    def consume(self, tokens: Sequence[int]) -> None:
        """Advance by generated tokens (each allowed by the mask it was sampled under), up to and including the
        first end-of-generation token. Raises RuntimeError if the matcher refuses one (a mask was not applied)."""
        for token in tokens:
            self._matcher.consume_token(token)
            self._check()
            if token in self._grammar.end_ids:
                return

    def _check(self) -> None:
        if self._matcher.is_error():
            raise RuntimeError(f"grammar matcher: {self._matcher.get_error()}")


class MaskRows:
    """Token bitmask rows llguidance fills (int32 words, read as uint32), grown on demand and reused."""

    def __init__(self, words: int):
        self._rows = np.empty((1, words), dtype=np.int32)

    def fill(self, matcher: llguidance.LLMatcher, row: int) -> np.ndarray:
        """Fills row `row` with the tokens `matcher` allows next and returns it, uint32 [words] (rows before it
        kept)."""
        if len(self._rows) <= row:
            grown = np.empty((max(row + 1, 2 * len(self._rows)), self._rows.shape[1]), dtype=np.int32)
            grown[: len(self._rows)] = self._rows
            self._rows = grown
        fill_next_token_bitmask(matcher, self._rows, row)
        return self._rows[row].view(np.uint32)

    def first(self, n: int) -> np.ndarray:
        """uint32 [n, words]: the first n rows."""
        return self._rows[:n].view(np.uint32)


class RoundMasks:
    """The grammar's masks of one draft-MTP round: row i the tokens allowed after the round's first i drafts, from
    a lookahead `ahead` that consumes each draft as it is drawn (a copy of the matcher when the round drafts: 3 us,
    less than consuming 3 tokens and rolling them back, 6 us; and llguidance cannot roll back over a Lark rule with
    stop= or max_tokens=). The matcher itself moves only by what the round emits (Constraint.consume)."""

    def __init__(self, ahead: llguidance.LLMatcher, rows: MaskRows):
        self._ahead = ahead
        self._rows = rows
        self.n = 0  # drafts consumed by the lookahead
        self._next = rows.fill(ahead, 0)

    def draft_mask(self) -> np.ndarray:
        """uint32 [ceil(n_vocab / 32)]: the tokens the next draft may be."""
        return self._next

    def drafted(self, token: int) -> None:
        """The next draft was `token` (drawn under draft_mask): the lookahead consumes it. Raises RuntimeError if the
        matcher refuses it."""
        self._ahead.consume_token(token)
        if self._ahead.is_error():
            raise RuntimeError(f"grammar matcher: {self._ahead.get_error()}")
        self.n += 1
        self._next = self._rows.fill(self._ahead, self.n)

    def verify_masks(self) -> np.ndarray:
        """uint32 [n + 1, ceil(n_vocab / 32)]: the verify rows' masks (Generator.verify's masks)."""
        return self._rows.first(self.n + 1)
