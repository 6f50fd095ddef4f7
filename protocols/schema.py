"""Field-level validation of message types: what a field may hold on the wire, checked on encode
and decode, so a malformed message names the field that is wrong.

Kept separate from the message definitions so messages.py reads as the list of contracts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

import numpy as np

from protocols.errors import ProtocolError

__all__ = ["ARRAY_DTYPES", "FieldCheck", "RawArray", "array_field", "build_checks", "check_json_like"]

# dtypes that may travel as typed binary (docs/architecture.md §Delivery and state: arrays are not lists of ints).
ARRAY_DTYPES = ("int32", "int64", "uint8", "float32", "float16", "bool")

Checker = Callable[[str, Any], Any]


class RawArray:
    """A typed-binary array as it came off the wire, validated only where its field is known.

    The codec's ext hook cannot know which field it is decoding; keeping the bytes until the field
    check lets a corrupt array be reported as e.g. `Trajectory.token_ids`, not just "the payload".
    """

    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes) -> None:
        self.code = code
        self.data = data

    def to_array(self, path: str, decode: Callable[[str, int, bytes], np.ndarray]) -> np.ndarray:
        return decode(path, self.code, self.data)


# Set by the codec: (path, ext code, bytes) -> array, raising ProtocolError(path, ...) when corrupt.
RAW_ARRAY_DECODER: list[Callable[[str, int, bytes], np.ndarray]] = []


def array_field(dtype: str, **kwargs: Any) -> Any:
    """A dataclass field holding a 1-D numpy array of `dtype`; lists are converted on construction."""
    if dtype not in ARRAY_DTYPES:
        raise ValueError(f"array dtype {dtype!r} not in {ARRAY_DTYPES}")
    return dataclasses.field(metadata={"dtype": dtype}, **kwargs)


def check_json_like(path: str, value: Any, depth: int = 0) -> Any:
    """Accept only what msgpack carries natively (str, int, float, bool, None, bytes, list, dict[str, ...])."""
    if depth > 16:
        raise ProtocolError(path, "nested more than 16 levels")
    if value is None or isinstance(value, (str, bool, int, float, bytes)):
        return value
    if isinstance(value, RawArray):
        raise ProtocolError(path, "typed arrays travel only in array fields")
    if isinstance(value, (list, tuple)):
        return [check_json_like(f"{path}[{i}]", v, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ProtocolError(path, f"map key {k!r} is {type(k).__name__}, expected str")
            out[k] = check_json_like(f"{path}.{k}", v, depth + 1)
        return out
    raise ProtocolError(path, f"{type(value).__name__} cannot travel on the wire")


def _kind(value: Any) -> str:
    return "a typed array" if isinstance(value, RawArray) else type(value).__name__


def _scalar(expected: type) -> Checker:
    def check(path: str, value: Any) -> Any:
        if expected is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ProtocolError(path, f"expected float, got {_kind(value)}")
            return float(value)
        if expected is int and isinstance(value, bool):
            raise ProtocolError(path, "expected int, got bool")
        if not isinstance(value, expected):
            raise ProtocolError(path, f"expected {expected.__name__}, got {_kind(value)}")
        return value

    return check


def _array(dtype: str) -> Checker:
    def check(path: str, value: Any) -> Any:
        # Only typed binary off the wire: a list would be coerced by numpy ("12" -> 12, True -> 1).
        # (Lists given when a message is built by hand were converted in Message.__post_init__.)
        if isinstance(value, RawArray):
            value = value.to_array(path, RAW_ARRAY_DECODER[0])
        if not isinstance(value, np.ndarray):
            raise ProtocolError(path, f"expected a {dtype} array, got {type(value).__name__}")
        if value.dtype != np.dtype(dtype):
            raise ProtocolError(path, f"expected dtype {dtype}, got {value.dtype}")
        if value.ndim != 1:
            raise ProtocolError(path, f"expected a 1-D array, got shape {value.shape}")
        return value

    return check


def _checker_for(annotation: Any, dtype: str | None) -> Checker:
    if dtype is not None:
        return _array(dtype)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return check_json_like
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {annotation}")
        inner_check = _checker_for(inner[0], None)
        return lambda path, v: None if v is None else inner_check(path, v)
    if origin is list:
        item = _checker_for(args[0], None)

        def check_list(path: str, value: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                raise ProtocolError(path, f"expected a list, got {type(value).__name__}")
            return [item(f"{path}[{i}]", v) for i, v in enumerate(value)]

        return check_list
    if origin is dict:
        if args[0] is not str:
            raise TypeError(f"map keys must be str: {annotation}")
        item = _checker_for(args[1], None)

        def check_dict(path: str, value: Any) -> Any:
            if not isinstance(value, dict):
                raise ProtocolError(path, f"expected a map, got {type(value).__name__}")
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise ProtocolError(path, f"map key {k!r} is {type(k).__name__}, expected str")
                out[k] = item(f"{path}.{k}", v)
            return out

        return check_dict
    if annotation in (str, int, float, bool, bytes):
        return _scalar(annotation)
    raise TypeError(f"unsupported field type {annotation!r}")


@dataclasses.dataclass(frozen=True)
class FieldCheck:
    """How one field of a message type is validated."""

    name: str
    path: str  # "<Type>.<field>", computed once: errors name it, the hot path never formats it
    check: Checker
    required: bool
    choices: tuple[str, ...] | None
    finite: bool
    default: Callable[[], Any] | None  # makes the value of a missing optional field
    max_len: int | None = None  # most characters of a string field (an id or a name: replies echo them)
    valid: Callable[[Any], str | None] | None = None  # what is wrong with a value (None: nothing), beyond its type

    def __call__(self, value: Any) -> Any:
        path = self.path
        value = self.check(path, value)
        if self.choices is not None and value not in self.choices:
            raise ProtocolError(path, f"{value!r} is not one of {', '.join(self.choices)}")
        if self.finite and isinstance(value, float) and not math.isfinite(value):
            raise ProtocolError(path, f"{value!r} is not a finite number")
        if self.max_len is not None and isinstance(value, str) and len(value) > self.max_len:
            raise ProtocolError(path, f"{len(value)} characters, more than {self.max_len}")
        if self.valid is not None and (problem := self.valid(value)) is not None:
            raise ProtocolError(path, problem)
        return value


def _same(value: Any) -> Any:
    """A field's plain default, as a factory."""
    return value


def build_checks(cls: type) -> tuple[FieldCheck, ...]:
    """One FieldCheck per dataclass field of `cls`, from its annotations and field metadata."""
    hints = typing.get_type_hints(cls)
    checks = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default: Callable[[], Any] | None = functools.partial(_same, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory
        else:
            default = None
        checks.append(
            FieldCheck(
                name=f.name,
                path=f"{cls.__name__}.{f.name}",
                check=_checker_for(hints[f.name], f.metadata.get("dtype")),
                required=default is None,
                choices=f.metadata.get("choices"),
                finite=f.metadata.get("finite", False),
                default=default,
                max_len=f.metadata.get("max_len"),
                valid=f.metadata.get("valid"),
            )
        )
    return tuple(checks)
