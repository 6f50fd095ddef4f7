"""Decoding anything off the wire raises ProtocolError and nothing else, naming the field at fault:
random bytes, truncated or bit-flipped valid encodings, wrong types in fields, missing and unexpected
fields, unknown versions and types, oversized payloads, corrupt typed arrays. No network."""

from __future__ import annotations

import dataclasses
import struct
import typing
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import MESSAGE_TYPES, SCHEMA_VERSION, Message, ProtocolError, Trajectory, decode, encode
from protocols.subjects import side_problem, sub_types_problem
from tests.strategies import any_message, message_strategy, simple_message

_DTYPE_CODES = {"int32": 1, "int64": 2, "uint8": 3, "float32": 4, "float16": 5, "bool": 6}


def decode_or_protocol_error(data: Any, **kwargs: Any) -> Message | ProtocolError:
    """Decode; a ProtocolError is returned (with a field), any other exception fails the test."""
    try:
        message = decode(data, **kwargs)
    except ProtocolError as exc:
        assert isinstance(exc.field, str) and exc.field, f"ProtocolError without a field: {exc!r}"
        assert exc.problem, f"ProtocolError without a problem: {exc!r}"
        return exc
    assert isinstance(message, Message)
    return message


def unpack_wire(raw: bytes) -> dict:
    """The wire map with arrays kept as raw ExtType (so tests can corrupt them)."""
    return msgpack.unpackb(raw, raw=False, ext_hook=lambda code, data: msgpack.ExtType(code, data))


def pack_wire(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def ext_array(
    dtype: str, values: list, length: int | None = None, code: int | None = None, ext_type: int = 1
) -> msgpack.ExtType:
    body = np.asarray(values, dtype=dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes()
    header = struct.pack(
        "<BI", _DTYPE_CODES[dtype] if code is None else code, len(values) if length is None else length
    )
    return msgpack.ExtType(ext_type, header + body)


def wire_of(message: Message) -> dict:
    return unpack_wire(encode(message))


# ---- random and mutated bytes ---------------------------------------------------------------
@settings(max_examples=400)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_protocol_error(data):
    decode_or_protocol_error(data)


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_random_bytes_behind_a_valid_envelope_prefix(data):
    # b"\x84\xa1v\x01" opens a 4-entry map with v=1: the fuzz reaches past the version check.
    decode_or_protocol_error(b"\x84\xa1v\x01\xa1t" + data)


@settings(max_examples=150)
@given(message=any_message(), data=st.data())
def test_truncated_encodings_raise_only_protocol_error(message, data):
    raw = encode(message)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="cut")
    result = decode_or_protocol_error(raw[:cut])
    assert isinstance(result, ProtocolError), f"a truncated encoding ({cut} of {len(raw)} bytes) decoded"
    assert result.field == "<payload>"


@settings(max_examples=300)
@given(message=any_message(), data=st.data())
def test_bit_flips_raise_only_protocol_error(message, data):
    raw = bytearray(encode(message))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4), label="flips")):
        bit = data.draw(st.integers(min_value=0, max_value=len(raw) * 8 - 1), label="bit")
        raw[bit // 8] ^= 1 << (bit % 8)
    decode_or_protocol_error(bytes(raw))


@settings(max_examples=200)
@given(message=any_message(), data=st.data())
def test_spliced_bytes_raise_only_protocol_error(message, data):
    raw = encode(message)
    at = data.draw(st.integers(min_value=0, max_value=len(raw)), label="at")
    cut = data.draw(st.integers(min_value=0, max_value=8), label="cut")
    junk = data.draw(st.binary(max_size=12), label="junk")
    decode_or_protocol_error(raw[:at] + junk + raw[at + cut :])


def test_trailing_garbage_is_refused():
    err = decode_or_protocol_error(
        encode(
            Trajectory(
                run_id="r",
                side="main",
                step=0,
                query_id="q",
                rollout_index=0,
                call_id="",
                policy_version=0,
                token_ids=[1],
                loss_mask=[1],
                logprobs=[0.0],
            )
        )
        + b"\x00"
    )
    assert isinstance(err, ProtocolError) and err.field == "<payload>"


@pytest.mark.parametrize("data", [None, "a string", 42, [b"x"], {"v": 1}])
def test_non_bytes_input_is_refused(data):
    err = decode_or_protocol_error(data)
    assert isinstance(err, ProtocolError) and err.field == "<payload>"


# ---- size limit -----------------------------------------------------------------------------
def test_payload_beyond_max_bytes_is_refused_before_parsing():
    raw = encode(
        Trajectory(
            run_id="r",
            side="main",
            step=0,
            query_id="q",
            rollout_index=0,
            call_id="",
            policy_version=0,
            token_ids=np.zeros(500, np.int32),
            loss_mask=np.zeros(500, np.uint8),
            logprobs=np.zeros(500, np.float32),
        )
    )
    assert isinstance(decode_or_protocol_error(raw, max_bytes=len(raw)), Message)
    err = decode_or_protocol_error(raw, max_bytes=len(raw) - 1)
    assert isinstance(err, ProtocolError) and err.field == "<payload>"
    assert str(len(raw) - 1) in err.problem and "limit" in err.problem
    junk = b"\xff" * 2048
    err = decode_or_protocol_error(junk, max_bytes=1024)
    assert isinstance(err, ProtocolError) and "limit" in err.problem


# ---- the envelope ---------------------------------------------------------------------------
def _metric_wire() -> dict:
    return {"v": SCHEMA_VERSION, "t": "Metric", "ts": 1.0, "d": {"name": "m", "value": 1.0}}


def test_a_hand_built_envelope_decodes():
    assert decode(pack_wire(_metric_wire())) == MESSAGE_TYPES["Metric"](name="m", value=1.0)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"v": SCHEMA_VERSION + 1}, "<envelope>.v"),
        ({"v": 0}, "<envelope>.v"),
        ({"v": "1"}, "<envelope>.v"),
        ({"v": None}, "<envelope>.v"),
        ({"v": [1]}, "<envelope>.v"),
        ({"t": "NoSuchType"}, "<envelope>.t"),
        ({"t": "Message"}, "<envelope>.t"),
        ({"t": 7}, "<envelope>.t"),
        ({"t": None}, "<envelope>.t"),
        ({"ts": "yesterday"}, "<envelope>.ts"),
        ({"ts": None}, "<envelope>.ts"),
        ({"ts": True}, "<envelope>.ts"),
        ({"d": [1, 2]}, "Metric"),
        ({"d": "x"}, "Metric"),
    ],
)
def test_bad_envelope_names_the_part(change, field):
    wire = _metric_wire()
    wire.update(change)
    err = decode_or_protocol_error(pack_wire(wire))
    assert isinstance(err, ProtocolError) and err.field == field, err


@pytest.mark.parametrize("missing", ["v", "t", "ts", "d"])
def test_envelope_missing_part_is_refused(missing):
    wire = _metric_wire()
    del wire[missing]
    err = decode_or_protocol_error(pack_wire(wire))
    assert isinstance(err, ProtocolError)
    assert missing in err.field or err.field == "Metric"


@pytest.mark.parametrize("top", [[1, 2], "Metric", 1, None, b"bytes"])
def test_envelope_must_be_a_map(top):
    err = decode_or_protocol_error(pack_wire(top))
    assert isinstance(err, ProtocolError) and err.field == "<envelope>"


def test_array_where_the_version_belongs_is_a_protocol_error():
    # A typed array in the envelope's "v" slot (a bit flip can make one): must not escape as another error.
    for length in (0, 1, 2, 3):
        wire = _metric_wire()
        wire["v"] = ext_array("int32", list(range(length)))
        err = decode_or_protocol_error(pack_wire(wire))
        assert isinstance(err, ProtocolError) and err.field == "<envelope>.v", f"v = int32 array of {length}: {err!r}"


# ---- field by field, for every message type --------------------------------------------------
def _field_cases() -> list[tuple[str, str]]:
    return [(name, f.name) for name in sorted(MESSAGE_TYPES) for f in dataclasses.fields(MESSAGE_TYPES[name])]


def _wrong_values(cls: type[Message], f: dataclasses.Field) -> list[Any]:
    """Values of the wrong type for field `f` (as they would arrive on the wire)."""
    dtype = f.metadata.get("dtype")
    if dtype is not None:
        other = "int64" if dtype != "int64" else "int32"
        return ["not an array", 3, {"a": 1}, [["nested"]], ext_array(other, [1, 2])]
    hint = typing.get_type_hints(cls)[f.name]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return [ext_array("int32", [1]), {1: "int key"}]
    if origin is not None and type(None) in args:  # X | None
        return [12345 if str in args else "a string"]
    if origin is list:
        return ["a string", {"k": "v"}, [b"\x00" if args[0] is str else "x"]]
    if origin is dict:
        if args[1] is Any:
            return [[1, 2], "a string", {1: "int key"}, {"k": ext_array("int32", [1])}]
        wrong_maps = [[1, 2], "a string", {"k": b"\x00" if args[1] is str else "x"}]
        by_type = f.metadata.get("valid") is sub_types_problem
        return [*wrong_maps, {"main": 1}, {"Bad-Type": 1}] if by_type else wrong_maps
    wrong = {
        str: [7, b"bytes", None, ["x"]],
        int: ["7", 7.5, True, None],
        float: ["0.5", None, [1.0]],
        bool: [1, "true", None],
        bytes: ["text", 5, None],
    }[hint]
    if f.metadata.get("choices"):
        wrong = [*wrong, "definitely-not-a-choice"]
    if f.metadata.get("valid") is side_problem:
        wrong = [*wrong, "Not-A-Side", "tool"]
    if f.metadata.get("finite"):
        wrong = [*wrong, float("nan"), float("inf")]
    return wrong


@pytest.mark.parametrize(("type_name", "field"), _field_cases())
@settings(max_examples=3)
@given(data=st.data())
def test_wrong_type_in_a_field_names_that_field(type_name, field, data):
    cls = MESSAGE_TYPES[type_name]
    f = next(f for f in dataclasses.fields(cls) if f.name == field)
    wire = wire_of(data.draw(message_strategy(cls), label="message"))
    for bad in _wrong_values(cls, f):
        wire["d"][field] = bad
        err = decode_or_protocol_error(pack_wire(wire))
        assert isinstance(err, ProtocolError), f"{type_name}.{field} accepted {bad!r}"
        assert err.field.startswith(f"{type_name}.{field}"), f"{bad!r}: error names {err.field!r}: {err}"


def _required_fields() -> list[tuple[str, str]]:
    return [(name, c.name) for name in sorted(MESSAGE_TYPES) for c in MESSAGE_TYPES[name]._checks if c.required]


@pytest.mark.parametrize(("type_name", "field"), _required_fields())
@settings(max_examples=2)
@given(data=st.data())
def test_missing_required_field_is_named(type_name, field, data):
    wire = wire_of(data.draw(message_strategy(MESSAGE_TYPES[type_name])))
    del wire["d"][field]
    err = decode_or_protocol_error(pack_wire(wire))
    assert isinstance(err, ProtocolError)
    assert err.field == f"{type_name}.{field}" and "missing" in err.problem


def test_optional_fields_may_be_left_out():
    wire = _metric_wire()
    assert set(wire["d"]) == {"name", "value"}  # step, node, role, tags take their defaults
    back = decode(pack_wire(wire))
    assert (back.step, back.node, back.tags) == (0, "", {})


@pytest.mark.parametrize("type_name", sorted(MESSAGE_TYPES))
@settings(max_examples=2)
@given(data=st.data())
def test_unexpected_field_is_named(type_name, data):
    wire = wire_of(data.draw(message_strategy(MESSAGE_TYPES[type_name])))
    wire["d"]["zz_not_a_field"] = 1
    err = decode_or_protocol_error(pack_wire(wire))
    assert isinstance(err, ProtocolError) and err.field == f"{type_name}.zz_not_a_field"


# ---- typed arrays ---------------------------------------------------------------------------
def _array_fields() -> list[tuple[str, str, str]]:
    return [
        (name, f.name, f.metadata["dtype"])
        for name in sorted(MESSAGE_TYPES)
        for f in dataclasses.fields(MESSAGE_TYPES[name])
        if "dtype" in f.metadata
    ]


def test_array_fields_cover_several_dtypes():
    assert {dtype for _, _, dtype in _array_fields()} >= {"int32", "uint8", "float32"}


@pytest.mark.parametrize(("type_name", "field", "dtype"), _array_fields())
def test_array_of_another_valid_dtype_names_the_field(type_name, field, dtype):
    wire = wire_of(_EXAMPLES[type_name])
    for other in _DTYPE_CODES:
        if other == dtype:
            continue
        wire["d"][field] = ext_array(other, [0, 1])
        err = decode_or_protocol_error(pack_wire(wire))
        assert isinstance(err, ProtocolError) and err.field == f"{type_name}.{field}", err
        assert dtype in err.problem


_CORRUPTIONS = {
    "unknown dtype code": lambda dtype: ext_array(dtype, [1, 2, 3], code=99),
    "dtype code 0": lambda dtype: ext_array(dtype, [1, 2, 3], code=0),
    "length says more than sent": lambda dtype: ext_array(dtype, [1, 2, 3], length=4),
    "length says fewer than sent": lambda dtype: ext_array(dtype, [1, 2, 3], length=2),
    "length near 2**32": lambda dtype: ext_array(dtype, [1, 2, 3], length=2**32 - 1),
    "header truncated": lambda dtype: msgpack.ExtType(1, bytes([_DTYPE_CODES[dtype], 3, 0])),
    "empty ext": lambda dtype: msgpack.ExtType(1, b""),
    "unknown ext type": lambda dtype: ext_array(dtype, [1, 2, 3], ext_type=9),
}


@pytest.mark.parametrize("corruption", sorted(_CORRUPTIONS))
def test_corrupt_array_raises_only_protocol_error(corruption):
    for type_name, field, dtype in _array_fields():
        wire = wire_of(_EXAMPLES[type_name])
        wire["d"][field] = _CORRUPTIONS[corruption](dtype)
        err = decode_or_protocol_error(pack_wire(wire))
        assert isinstance(err, ProtocolError), f"{type_name}.{field}: {corruption} decoded"


def test_corrupt_array_error_names_the_field():
    # codec.py promises "Decoding anything malformed raises ProtocolError naming the field": a corrupt
    # typed array (bad dtype code, length, ext type) must say which field it was found in.
    wrong = []
    for corruption in sorted(_CORRUPTIONS):
        for type_name, field, dtype in _array_fields():
            wire = wire_of(_EXAMPLES[type_name])
            wire["d"][field] = _CORRUPTIONS[corruption](dtype)
            err = decode_or_protocol_error(pack_wire(wire))
            if not (isinstance(err, ProtocolError) and err.field == f"{type_name}.{field}"):
                wrong.append(f"{type_name}.{field} / {corruption}: got {err}")
    assert not wrong, f"{len(wrong)} corrupt arrays not attributed to their field, e.g.:\n" + "\n".join(wrong[:5])


def test_bool_array_with_bytes_other_than_0_and_1_is_refused():
    # No message type has a bool array field today, so check the array decoder the codec uses directly.
    from protocols.codec import _decode_array

    with pytest.raises(ProtocolError) as err:
        _decode_array("X.flags", 1, struct.pack("<BI", _DTYPE_CODES["bool"], 3) + bytes([0, 1, 2]))
    assert err.value.field == "X.flags" and "bool" in err.value.problem


def test_typed_array_in_a_non_array_field_is_refused_naming_the_field():
    arr = msgpack.ExtType(1, struct.pack("<BI", _DTYPE_CODES["int32"], 1) + bytes(4))
    with pytest.raises(ProtocolError) as err:
        decode(
            pack_wire(
                {"v": SCHEMA_VERSION, "t": "Metric", "ts": 1.0, "d": {"name": "m", "value": 1.0, "tags": {"x": arr}}}
            )
        )
    assert err.value.field == "Metric.tags.x" and "typed array" in err.value.problem


_EXAMPLES = {name: simple_message(cls) for name, cls in MESSAGE_TYPES.items()}
