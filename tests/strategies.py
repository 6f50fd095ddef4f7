"""Hypothesis strategies for every wire message type, derived from the dataclass fields and their
metadata (so a message type added to protocols.MESSAGE_TYPES is covered without editing this file).

- array fields (`dtype` metadata): 1-D numpy arrays of exactly that dtype, any values (NaN/inf too);
- `choices` metadata: one of the choices;
- `valid` metadata: a side ("main" or a sub-agent type's name), or a map keyed by sub-agent type names;
- floats with `finite` metadata: NaN- and inf-free; other top-level floats may be NaN or inf;
- floats nested in lists/maps are NaN-free (NaN != NaN would make dict equality meaningless);
- strings: any unicode text (astral plane included); ints: the signed 64-bit range;
- `Any`: JSON-like values (None, bool, int, float, str, bytes, lists, str-keyed maps), a few levels deep.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from protocols import MESSAGE_TYPES, Message
from protocols.subjects import RESERVED_SUB_TYPES, side_problem, sub_types_problem

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(max_size=24)
NESTED_FLOAT = st.floats(allow_nan=False)
SUB_TYPE = st.from_regex(r"[a-z][a-z0-9_]{0,31}", fullmatch=True).filter(lambda name: name not in RESERVED_SUB_TYPES)


def json_like(depth: int = 3) -> st.SearchStrategy:
    scalars = st.none() | st.booleans() | INT64 | NESTED_FLOAT | TEXT | st.binary(max_size=16)
    if depth == 0:
        return scalars
    inner = json_like(depth - 1)
    return scalars | st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3)


def _for_hint(hint: Any, *, top_level: bool, finite: bool) -> st.SearchStrategy:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return json_like()
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        assert len(inner) == 1, hint
        return st.none() | _for_hint(inner[0], top_level=top_level, finite=finite)
    if origin is list:
        return st.lists(_for_hint(args[0], top_level=False, finite=finite), max_size=4)
    if origin is dict:
        return st.dictionaries(TEXT, _for_hint(args[1], top_level=False, finite=finite), max_size=4)
    if hint is str:
        return TEXT
    if hint is int:
        return INT64
    if hint is bool:
        return st.booleans()
    if hint is bytes:
        return st.binary(max_size=64)
    if hint is float:
        if finite:
            return st.floats(allow_nan=False, allow_infinity=False)
        return st.floats() if top_level else NESTED_FLOAT
    raise TypeError(f"no strategy for field type {hint!r}: extend tests/strategies.py")


def field_strategy(cls: type[Message], f: dataclasses.Field) -> st.SearchStrategy:
    dtype = f.metadata.get("dtype")
    if dtype is not None:
        return hnp.arrays(np.dtype(dtype), st.integers(min_value=0, max_value=48))
    choices = f.metadata.get("choices")
    if choices is not None:
        return st.sampled_from(choices)
    valid = f.metadata.get("valid")
    if valid is side_problem:
        return st.just("main") | SUB_TYPE
    if valid is sub_types_problem:
        return st.dictionaries(SUB_TYPE, INT64, max_size=4)
    if valid is not None:
        raise TypeError(f"no strategy for {cls.__name__}.{f.name}'s `valid` check: extend tests/strategies.py")
    hint = typing.get_type_hints(cls)[f.name]
    return _for_hint(hint, top_level=True, finite=bool(f.metadata.get("finite")))


def message_strategy(cls: type[Message]) -> st.SearchStrategy:
    """Valid instances of `cls`, every field given."""
    return st.builds(cls, **{f.name: field_strategy(cls, f) for f in dataclasses.fields(cls)})


def any_message() -> st.SearchStrategy:
    return st.one_of(*(message_strategy(MESSAGE_TYPES[name]) for name in sorted(MESSAGE_TYPES)))


def simple_message(cls: type[Message]) -> Message:
    """One small valid instance of `cls` (every field set to a plain value of its type)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if "dtype" in f.metadata:
            values[f.name] = np.arange(3).astype(f.metadata["dtype"])
        elif f.metadata.get("choices"):
            values[f.name] = f.metadata["choices"][0]
        elif f.metadata.get("valid") is side_problem:
            values[f.name] = "main"
        elif hint is Any or typing.get_origin(hint) is dict:
            values[f.name] = {}
        elif typing.get_origin(hint) is list:
            values[f.name] = []
        elif typing.get_origin(hint) in (typing.Union, types.UnionType):
            values[f.name] = None
        else:
            values[f.name] = {str: "x", int: 1, float: 0.5, bool: True, bytes: b"b"}[hint]
    return cls(**values)
