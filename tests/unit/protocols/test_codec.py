"""The msgpack codec round-trips every message type exactly (typed arrays keep their dtype), and
refuses to encode what would not decode: wrong field types, non-finite floats where `finite` is set,
arrays of the wrong dtype or shape, messages over the size limit. No network."""

from __future__ import annotations

import dataclasses
import math
import time

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import protocols
from protocols import (
    MESSAGE_TYPES,
    SCHEMA_VERSION,
    DeadLetter,
    Message,
    Metric,
    ProtocolError,
    RewardStats,
    ToolRequest,
    Trajectory,
    decode,
    decode_envelope,
    encode,
)
from tests.strategies import message_strategy


def _assert_same(a: Message, b: Message) -> None:
    assert type(b) is type(a)
    assert b == a
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, np.ndarray):
            assert isinstance(vb, np.ndarray) and vb.dtype == va.dtype and vb.shape == va.shape, f.name
            assert va.tobytes() == vb.tobytes(), f"{f.name}: bits changed in transit"
        elif isinstance(va, float) and math.isnan(va):
            assert isinstance(vb, float) and math.isnan(vb), f.name
        else:
            assert type(vb) is type(va) or (va is None) == (vb is None), f"{f.name}: {type(va)} -> {type(vb)}"


def test_every_exported_message_type_is_registered():
    exported = {
        name
        for name in protocols.__all__
        if isinstance(getattr(protocols, name), type)
        and issubclass(getattr(protocols, name), Message)
        and name != "Message"
    }
    assert exported == set(MESSAGE_TYPES)
    assert {"RolloutRequest", "Trajectory", "RewardStats", "AlignedBatch", "DeadLetter", "NodeInfo"} <= set(
        MESSAGE_TYPES
    )


@pytest.mark.parametrize("type_name", sorted(MESSAGE_TYPES))
@settings(max_examples=50)
@given(data=st.data())
def test_round_trip_every_message_type(type_name, data):
    message = data.draw(message_strategy(MESSAGE_TYPES[type_name]), label=type_name)
    raw = encode(message)
    assert isinstance(raw, bytes)
    _assert_same(message, decode(raw))


def test_envelope_carries_version_type_and_send_time():
    before = time.time()
    env = decode_envelope(encode(Metric(name="loss", value=0.5, step=3)))
    assert (env.version, env.type_name) == (SCHEMA_VERSION, "Metric")
    assert before - 1 <= env.sent_at <= time.time() + 1
    assert env.message == Metric(name="loss", value=0.5, step=3)


def test_arrays_travel_as_typed_binary_not_lists():
    traj = Trajectory(
        run_id="r1",
        side="main",
        step=1,
        query_id="q",
        rollout_index=0,
        call_id="",
        policy_version=2,
        token_ids=np.arange(1000, dtype=np.int32),
        loss_mask=np.ones(1000, dtype=np.uint8),
        logprobs=np.full(1000, -0.5, dtype=np.float32),
    )
    raw = encode(traj)
    # 1000 x (4 + 1 + 4) bytes of array data plus a small envelope: no per-element msgpack ints.
    assert 9000 < len(raw) < 9600
    wire = msgpack.unpackb(raw, raw=False, ext_hook=lambda code, data: msgpack.ExtType(code, data))
    assert isinstance(wire["d"]["token_ids"], msgpack.ExtType)
    back = decode(raw)
    assert back.token_ids.dtype == np.int32 and back.token_ids[-1] == 999
    assert back.logprobs.dtype == np.float32 and back.loss_mask.dtype == np.uint8


def test_lists_given_for_array_fields_become_typed_arrays():
    traj = Trajectory(
        run_id="r",
        side="sub",
        step=0,
        query_id="q",
        rollout_index=1,
        call_id="c1",
        policy_version=0,
        token_ids=[1, 2, 3],
        loss_mask=[0, 1, 1],
        logprobs=[0.0, -1.0, -2.0],
    )
    assert traj.token_ids.dtype == np.int32 and traj.loss_mask.dtype == np.uint8 and traj.logprobs.dtype == np.float32
    _assert_same(traj, decode(encode(traj)))


def test_unicode_and_bytes_survive():
    req = ToolRequest(
        call_id="Ω-1", tool="search", arguments={"q": "Zürich 東京 🚀", "raw": b"\x00\xff", "n": [1, 2.5, None, True]}
    )
    assert decode(encode(req)) == req
    letter = DeadLetter(subject="mgrpo.r.x", reason="bad", error_type="ProtocolError", payload=bytes(range(256)))
    assert decode(encode(letter)).payload == bytes(range(256))


@pytest.mark.parametrize("field", ["reward_main", "r_format", "r_correct"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_finite_fields_refuse_nan_and_inf(field, bad):
    values = dict(
        run_id="r",
        step=0,
        query_id="q",
        rollout_index=0,
        reward_main=1.0,
        r_format=1.0,
        r_correct=0.0,
        num_sub_calls=0,
        sub_call_ids=[],
    )
    values[field] = bad
    with pytest.raises(ProtocolError) as err:
        encode(RewardStats(**values))
    assert err.value.field == f"RewardStats.{field}"
    assert "finite" in err.value.problem


def test_non_finite_float_allowed_where_not_marked_finite():
    back = decode(encode(Metric(name="m", value=float("nan"))))
    assert math.isnan(back.value)


@pytest.mark.parametrize(
    ("message", "field", "problem"),
    [
        (Metric(name=5, value=1.0), "Metric.name", "expected str"),  # type: ignore[arg-type]
        (Metric(name="m", value="high"), "Metric.value", "expected float"),  # type: ignore[arg-type]
        (Metric(name="m", value=1.0, step=True), "Metric.step", "bool"),  # type: ignore[arg-type]
        (Metric(name="m", value=1.0, tags={"a": 1}), "Metric.tags.a", "expected str"),  # type: ignore[dict-item]
        (ToolRequest(call_id="c", tool="t", arguments={"x": object()}), "ToolRequest.arguments.x", "cannot travel"),
        (ToolRequest(call_id="c", tool="t", arguments={1: "x"}), "ToolRequest.arguments", "expected str"),  # type: ignore[dict-item]
        (
            Trajectory(
                run_id="r",
                side="Left-hand",
                step=0,
                query_id="q",
                rollout_index=0,
                call_id="",
                policy_version=0,
                token_ids=[],
                loss_mask=[],
                logprobs=[],
            ),
            "Trajectory.side",
            "is not a side",
        ),
    ],
)
def test_encode_names_the_wrong_field(message, field, problem):
    with pytest.raises(ProtocolError) as err:
        encode(message)
    assert err.value.field == field
    assert problem in err.value.problem


def _traj(**arrays) -> Trajectory:
    base = dict(token_ids=np.zeros(3, np.int32), loss_mask=np.zeros(3, np.uint8), logprobs=np.zeros(3, np.float32))
    base.update(arrays)
    return Trajectory(
        run_id="r", side="main", step=0, query_id="q", rollout_index=0, call_id="", policy_version=0, **base
    )


@pytest.mark.parametrize(
    ("arrays", "field", "problem"),
    [
        ({"token_ids": np.zeros(3, np.int64)}, "Trajectory.token_ids", "dtype int32"),
        ({"logprobs": np.zeros(3, np.float64)}, "Trajectory.logprobs", "dtype float32"),
        ({"loss_mask": np.zeros((2, 2), np.uint8)}, "Trajectory.loss_mask", "1-D"),
        ({"token_ids": np.zeros(3, ">i4")}, "Trajectory.token_ids", "dtype int32"),
    ],
)
def test_encode_refuses_wrong_array_dtype_or_shape(arrays, field, problem):
    with pytest.raises(ProtocolError) as err:
        encode(_traj(**arrays))
    assert err.value.field == field
    assert problem in err.value.problem


def test_encode_refuses_non_messages():
    with pytest.raises(ProtocolError) as err:
        encode({"t": "Metric"})  # type: ignore[arg-type]
    assert err.value.field == "<message>"


def test_encode_refuses_oversized_message_naming_the_limit():
    big = DeadLetter(subject="s", reason="r", error_type="e", payload=b"x" * 5000)
    assert len(encode(big)) > 5000
    with pytest.raises(ProtocolError) as err:
        encode(big, max_bytes=4096)
    assert err.value.field == "DeadLetter"
    assert "4096" in err.value.problem
