"""Typed reading of JSON documents (config.json, tokenizer.json, a safetensors index): every value the converter
uses is read through here, so a field of the wrong type or out of range fails as one ConversionError naming the
file and the field, never as a traceback deeper down or a silently wrong value ("no" read as true).

JSON types map strictly: an integer field takes a JSON integer (not 12.0, "12" or true), a float field a finite
JSON number that fits a float32 (the GGUF stores f32), a boolean field true or false, a list field a list.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from .errors import ConversionError

U32_MAX = 2**32 - 1
F32_MAX = 3.4028234663852886e38
_ABSENT = object()
REQUIRED = object()  # as a reader's default: the field must be present (and not null)


def json_type(v: Any) -> str:
    """The JSON name of a Python value from json.loads: 'a string', 'an integer', 'null', ..."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    return {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}.get(
        type(v), type(v).__name__)


def show(v: Any, limit: int = 60) -> str:
    """A short, JSON-like rendering of `v` for an error message (long values cut)."""
    text = repr(v) if not isinstance(v, bool) else str(v).lower()
    return text if len(text) <= limit else text[:limit] + "..."


class Fields:
    """Typed access to the fields of JSON objects, looked up in `sections` in order (e.g. a config's text_config,
    then its top level). `file` names the document in errors; `labels` gives each section's prefix there
    ("text_config." or "").

    Every reader returns the default when the field is absent from all sections (a default of REQUIRED makes
    that an error), and raises ConversionError ("config.json: field text_config.num_hidden_layers: expected an
    integer, got '12' (a string)") when it is present but of the wrong type or out of range.
    """

    def __init__(self, file: str, sections: list[dict], labels: list[str] | None = None):
        for s in sections:
            if not isinstance(s, dict):
                raise ConversionError(f"{file}: expected a JSON object, got {json_type(s)}")
        self.file, self.sections = file, sections
        self.labels = labels if labels is not None else [""] * len(sections)

    # ------------------------------------------------------------------------------------------ lookup

    def find(self, key: str) -> tuple[Any, str] | None:
        """(value, label) of the first section holding `key` (label: e.g. 'text_config.index_topk'), or None."""
        for s, label in zip(self.sections, self.labels):
            if key in s:
                return s[key], label + key
        return None

    def has(self, key: str) -> bool:
        """Whether any section holds `key` (null counts as present)."""
        return self.find(key) is not None

    def fail(self, label: str, what: str) -> ConversionError:
        """The error for field `label`: `raise fields.fail(label, "must be ...")`."""
        return ConversionError(f"{self.file}: field {label}: {what}")

    def _get(self, key: str, nullable: bool, default: Any) -> tuple[Any, str]:
        found = self.find(key)
        if found is None or (nullable and found[0] is None):
            if default is REQUIRED:
                raise self.fail(self.labels[0] + key, "required field is missing")
            return _ABSENT, key
        return found

    # ----------------------------------------------------------------------------------------- scalars

    def integer(self, key: str, default: int | None = None, lo: int = 0, hi: int = U32_MAX,
                nullable: bool = False) -> int | None:
        """A JSON integer in [lo, hi] (default range: what a GGUF uint32 holds). `nullable`: null = absent."""
        v, label = self._get(key, nullable, default)
        return default if v is _ABSENT else self.check_int(v, label, lo, hi)

    def check_int(self, v: Any, label: str, lo: int = 0, hi: int = U32_MAX) -> int:
        """`v` itself as an integer field named `label` (for list elements and nested objects)."""
        if type(v) is not int:
            raise self.fail(label, f"expected an integer, got {show(v)} ({json_type(v)})")
        if not lo <= v <= hi:
            raise self.fail(label, f"{show(v)} is out of range [{lo}, {hi}]")
        return v

    def number(self, key: str, default: float | None = None, lo: float = -F32_MAX, hi: float = F32_MAX,
               nullable: bool = False) -> float | None:
        """A finite JSON number in [lo, hi] (default range: what a float32 holds), as a Python float."""
        v, label = self._get(key, nullable, default)
        if v is _ABSENT:
            return default
        if type(v) not in (int, float):
            raise self.fail(label, f"expected a number, got {show(v)} ({json_type(v)})")
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f) or not lo <= f <= hi:
            raise self.fail(label, f"{show(v)} is not a finite number in [{lo:g}, {hi:g}]")
        return f

    def boolean(self, key: str, default: bool | None = None) -> bool | None:
        """A JSON boolean (true/false; "no", 0 or null are refused, not guessed)."""
        v, label = self._get(key, False, default)
        if v is _ABSENT:
            return default
        if not isinstance(v, bool):
            raise self.fail(label, f"expected true or false, got {show(v)} ({json_type(v)})")
        return v

    def string(self, key: str, default: str | None = None, nullable: bool = False) -> str | None:
        """A JSON string. `nullable`: null = absent."""
        v, label = self._get(key, nullable, default)
        if v is _ABSENT:
            return default
        if not isinstance(v, str):
            raise self.fail(label, f"expected a string, got {show(v)} ({json_type(v)})")
        return v

    # ------------------------------------------------------------------------------------- containers

    def array(self, key: str, default: list | None = None, n: int | None = None) -> list | None:
        """A JSON list (null = absent), of exactly `n` entries when given."""
        v, label = self._get(key, True, default)
        if v is _ABSENT:
            return default
        if not isinstance(v, list):
            raise self.fail(label, f"expected a list, got {show(v)} ({json_type(v)})")
        if n is not None and len(v) != n:
            raise self.fail(label, f"has {len(v)} entries, expected {n}")
        return v

    def str_array(self, key: str, choices: Iterable[str], default: list[str] | None = None,
                  n: int | None = None) -> list[str] | None:
        """A list of strings, each one of `choices` (null = absent)."""
        items = self.array(key, None, n)
        if items is None:
            return default
        allowed = list(choices)
        for i, s in enumerate(items):
            if not isinstance(s, str) or s not in allowed:
                raise self.fail(f"{self.find(key)[1]}[{i}]",
                                f"expected one of {', '.join(map(repr, allowed))}, got {show(s)}")
        return items

    def int_array(self, key: str, default: list[int] | None = None, n: int | None = None,
                  lo: int = 0, hi: int = U32_MAX) -> list[int] | None:
        """A list of integers, each in [lo, hi] (null = absent)."""
        items = self.array(key, None, n)
        if items is None:
            return default
        label = self.find(key)[1]
        return [self.check_int(x, f"{label}[{i}]", lo, hi) for i, x in enumerate(items)]

    def int_or_ints(self, key: str, lo: int = 0, hi: int = U32_MAX) -> list[int]:
        """An integer or a list of integers (e.g. eos_token_id), as a list; [] when absent or null."""
        v, label = self._get(key, True, None)
        if v is _ABSENT:
            return []
        if isinstance(v, list):
            return [self.check_int(x, f"{label}[{i}]", lo, hi) for i, x in enumerate(v)]
        return [self.check_int(v, label, lo, hi)]

    def object(self, key: str) -> "Fields":
        """The nested JSON object `key` as Fields (empty when absent or null)."""
        v, label = self._get(key, True, None)
        if v is _ABSENT:
            return Fields(self.file, [{}])
        if not isinstance(v, dict):
            raise self.fail(label, f"expected an object, got {show(v)} ({json_type(v)})")
        return Fields(self.file, [v], [label + "."])
