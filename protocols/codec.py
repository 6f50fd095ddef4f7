"""msgpack codec with a schema version, typed binary arrays and a size limit.

Wire layout: a msgpack map `{"v": SCHEMA_VERSION, "t": <type name>, "ts": <unix time>, "d": {fields}}`.
Arrays travel as msgpack ext type 1: `dtype code (1 byte) | length (uint32 LE) | raw little-endian bytes`.
Decoding anything malformed raises `ProtocolError` naming the field, and nothing else (arrays are
checked where their field is known, so a corrupt one is reported as e.g. `Trajectory.token_ids`).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from protocols.errors import ProtocolError
from protocols.messages import MESSAGE_TYPES, Message
from protocols.schema import RAW_ARRAY_DECODER, RawArray

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_ARRAY_ITEMS",
    "MAX_MAP_ENTRIES",
    "SCHEMA_VERSION",
    "Envelope",
    "decode",
    "decode_envelope",
    "encode",
]

SCHEMA_VERSION = 2  # 2: RolloutRequest and StepPlan carry sub_versions per sub-agent type
# 32 MiB: an aligned batch of 8x8x8 samples of 2k tokens is ~10 MB. The embedded nats-server is
# started with the same max_payload (mgrpo_actors/runtime/embedded.py).
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
# Most entries of any one map and items of any one list in a payload: refused when the header says
# more, before anything is built (2 M tool-argument keys in 10 MB cost seconds of CPU and 500 MB).
# Ours stay far below: the longest lists are a batch's sample ids (B·K·D), arrays travel as binary.
MAX_MAP_ENTRIES = 100_000
MAX_ARRAY_ITEMS = 1_000_000

_ARRAY_EXT = 1
_DTYPE_CODES = {"int32": 1, "int64": 2, "uint8": 3, "float32": 4, "float16": 5, "bool": 6}
_CODE_DTYPES = {code: np.dtype(name).newbyteorder("<") for name, code in _DTYPE_CODES.items()}
_HEADER = struct.Struct("<BI")


@dataclass(frozen=True)
class Envelope:
    """A decoded message with what travelled around it."""

    message: Message
    type_name: str
    version: int
    sent_at: float


def _pack_array(arr: np.ndarray) -> msgpack.ExtType:
    code = _DTYPE_CODES[arr.dtype.name]
    data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return msgpack.ExtType(_ARRAY_EXT, _HEADER.pack(code, arr.shape[0]) + data)


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return _pack_array(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} cannot travel on the wire")


def _ext_hook(code: int, data: bytes) -> RawArray:
    return RawArray(code, data)


def _decode_array(path: str, code: int, data: bytes) -> np.ndarray:
    """Bytes of ext type `code` -> a 1-D array; ProtocolError(path, ...) if anything is off."""
    if code != _ARRAY_EXT:
        raise ProtocolError(path, f"unknown msgpack ext type {code}")
    if len(data) < _HEADER.size:
        raise ProtocolError(path, "array header truncated")
    dtype_code, length = _HEADER.unpack_from(data)
    dtype = _CODE_DTYPES.get(dtype_code)
    if dtype is None:
        raise ProtocolError(path, f"unknown array dtype code {dtype_code}")
    body = memoryview(data)[_HEADER.size :]
    if len(body) != length * dtype.itemsize:
        raise ProtocolError(
            path, f"array of {length} x {dtype.name} needs {length * dtype.itemsize} bytes, got {len(body)}"
        )
    if dtype.name == "bool" and np.frombuffer(body, dtype=np.uint8).max(initial=0) > 1:
        raise ProtocolError(path, "bool array holds bytes other than 0 and 1")
    return np.frombuffer(body, dtype=dtype).astype(dtype.newbyteorder("="), copy=False)


RAW_ARRAY_DECODER.append(_decode_array)


def encode(message: Message, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """Validate and encode `message`; raises ProtocolError if a field is wrong or it is too large."""
    if not isinstance(message, Message):
        raise ProtocolError("<message>", f"{type(message).__name__} is not a wire message type")
    type_name = type(message).__name__
    fields = {c.name: c(getattr(message, c.name)) for c in type(message)._checks}
    try:
        data = msgpack.packb(
            {"v": SCHEMA_VERSION, "t": type_name, "ts": time.time(), "d": fields}, default=_default, use_bin_type=True
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(type_name, f"cannot encode: {exc}") from None
    if len(data) > max_bytes:
        raise ProtocolError(type_name, f"encoded size {len(data)} bytes exceeds the limit of {max_bytes}")
    return data


def _unpack(data: Any, max_bytes: int) -> dict:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError("<payload>", f"expected bytes, got {type(data).__name__}")
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > max_bytes:
        raise ProtocolError("<payload>", f"size {size} bytes exceeds the limit of {max_bytes}")
    try:
        obj = msgpack.unpackb(
            data if isinstance(data, bytes) else bytes(data),
            raw=False,
            ext_hook=_ext_hook,
            strict_map_key=False,
            max_map_len=MAX_MAP_ENTRIES,
            max_array_len=MAX_ARRAY_ITEMS,
        )
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises many types (ExtraData, FormatError, UnicodeDecodeError, ...)
        raise ProtocolError("<payload>", f"not valid msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("<envelope>", f"expected a map, got {type(obj).__name__}")
    return obj


def _decode_parts(data: Any, max_bytes: int) -> tuple[Message, str, int, float]:
    obj = _unpack(data, max_bytes)
    version = obj.get("v")
    if type(version) is not int or version not in (SCHEMA_VERSION, *_UPGRADES):
        raise ProtocolError("<envelope>.v", f"unknown schema version {version!r}; this build speaks {SCHEMA_VERSION}")
    type_name = obj.get("t")
    cls = MESSAGE_TYPES.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise ProtocolError("<envelope>.t", f"unknown message type {type_name!r}")
    sent_at = obj.get("ts")
    if isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)):
        raise ProtocolError("<envelope>.ts", f"expected a number, got {type(sent_at).__name__}")
    if not 0 <= sent_at < 1e11:  # seconds since 1970; also rejects NaN and infinities
        raise ProtocolError("<envelope>.ts", f"{sent_at!r} is not a plausible send time")
    fields = obj.get("d")
    if not isinstance(fields, dict):
        raise ProtocolError(f"{type_name}", f"fields must be a map, got {type(fields).__name__}")
    if version != SCHEMA_VERSION:  # a message an earlier build stored (a run resumed across an upgrade)
        fields = _UPGRADES[version](type_name, fields)
    return _build(cls, type_name, fields), type_name, version, float(sent_at)


def _from_version_1(type_name: str, fields: dict) -> dict:
    """Version 1's fields as version 2's: a run had the one default sub-agent type, and a RolloutRequest or StepPlan
    named its policy version as `sub_version`."""
    if type_name in ("RolloutRequest", "StepPlan") and "sub_version" in fields:
        fields = dict(fields)
        fields["sub_versions"] = {"sub": fields.pop("sub_version")}
    return fields


# Earlier schema versions a build still reads, each with what turns its fields into this version's.
_UPGRADES: dict[int, Callable[[str, dict], dict]] = {1: _from_version_1}


def decode_envelope(data: Any, max_bytes: int = DEFAULT_MAX_BYTES) -> Envelope:
    """Decode and validate, keeping the envelope (type, version, send time); raises only ProtocolError."""
    return Envelope(*_decode_parts(data, max_bytes))


def decode(data: Any, max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
    """Decode a message; raises only ProtocolError."""
    return _decode_parts(data, max_bytes)[0]


def _build(cls: type[Message], type_name: str, fields: dict) -> Message:
    unexpected = [k for k in fields if k not in cls._field_names]
    if unexpected:
        raise ProtocolError(f"{type_name}.{unexpected[0]}", "unexpected field")
    values = {}
    for check in cls._checks:
        if check.name in fields:
            values[check.name] = check(fields[check.name])
        elif check.required:
            raise ProtocolError(check.path, "missing")
        else:
            values[check.name] = check.default()  # type: ignore[misc]
    # Every field is validated and typed already: fill the frozen dataclass without re-running
    # __init__/__post_init__ (the hot path of every delivery).
    message = object.__new__(cls)
    message.__dict__.update(values)
    return message
