"""Sub-agent types on the wire (issue 22, 1 + n; protocols/subjects.py, protocols/codec.py): a side is "main" or a
type's name, a map by type names only types; RolloutRequest and StepPlan carry a policy version per type; what is
not a side or not a type is refused both ways, naming the field."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from protocols import ProtocolError, RolloutRequest, StepDone, StepPlan, Trajectory, WeightsVersion, decode, encode
from protocols.subjects import side_problem, sub_types_problem


def _request(sub_versions: dict[str, int]) -> RolloutRequest:
    return RolloutRequest(
        run_id="r",
        step=2,
        query_id="q1",
        question="Q?",
        answers=["a"],
        num_rollouts=4,
        main_version=3,
        sub_versions=sub_versions,
    )


def _plan(sub_versions: dict[str, int]) -> StepPlan:
    return StepPlan(run_id="r", step=2, query_ids=["q1"], num_rollouts=4, main_version=3, sub_versions=sub_versions)


def _trajectory(side: str) -> Trajectory:
    return Trajectory(
        run_id="r",
        side=side,
        step=0,
        query_id="q1",
        rollout_index=1,
        call_id="a1.r1.t0",
        policy_version=2,
        token_ids=np.arange(3, dtype=np.int32),
        loss_mask=np.array([0, 1, 1], np.uint8),
        logprobs=np.array([0, -0.5, -0.25], np.float32),
    )


def _with_field(message_bytes: bytes, name: str, value) -> bytes:
    """The encoded message with one field replaced, as a peer that skips encode's checks would send it."""
    envelope = msgpack.unpackb(message_bytes, raw=False, strict_map_key=False)
    envelope["d"][name] = value
    return msgpack.packb(envelope, use_bin_type=True)


# ---- side_problem / sub_types_problem -------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["main", "sub", "searcher", "calculator", "web_reader2"])
def test_main_and_every_valid_type_name_are_sides(side):
    assert side_problem(side) is None


@pytest.mark.parametrize(
    ("side", "problem"),
    [
        ("Bad-Side", "'Bad-Side' is not a side: neither 'main' nor a sub-agent type"),
        ("", "'' is not a side"),
        ("all", "is reserved"),
        ("tool", "is reserved"),
        (5, "5 is not a side"),
    ],
)
def test_what_is_not_a_side_is_named(side, problem):
    assert problem in side_problem(side)


def test_a_map_by_type_takes_only_type_names():
    assert sub_types_problem({}) is None
    assert sub_types_problem({"searcher": 2, "sub": 0}) is None
    assert sub_types_problem({"searcher": 2, "main": 1}) == "'main' is not a sub-agent type"
    assert sub_types_problem({"Bad-Side": 1}) == "'Bad-Side' is not a sub-agent type"


# ---- the codec ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sub_versions", [{"searcher": 2}, {"searcher": 2, "calculator": 0}, {"sub": 7}, {}])
def test_rollout_requests_and_step_plans_carry_a_version_per_type(sub_versions):
    for message in (_request(sub_versions), _plan(sub_versions)):
        back = decode(encode(message))
        assert back == message and back.sub_versions == sub_versions


def test_a_types_messages_round_trip_under_its_side():
    trajectory = decode(encode(_trajectory("calculator")))
    assert trajectory.side == "calculator"
    np.testing.assert_array_equal(trajectory.logprobs, _trajectory("calculator").logprobs)
    for message in (
        StepDone(run_id="r", side="calculator", step=1, batch_id="b1", version=2, loss=0.5),
        WeightsVersion(run_id="r", side="searcher", version=2, step=1, uri="obj://w"),
    ):
        assert decode(encode(message)) == message


def test_a_side_that_is_no_side_is_refused_both_ways_naming_the_field():
    with pytest.raises(ProtocolError) as encoding:
        encode(_trajectory("Bad-Side"))
    with pytest.raises(ProtocolError) as decoding:
        decode(_with_field(encode(_trajectory("calculator")), "side", "Bad-Side"))
    for caught in (encoding, decoding):
        assert caught.value.field == "Trajectory.side"
        assert "'Bad-Side' is not a side" in caught.value.problem


@pytest.mark.parametrize("make", [_request, _plan])
def test_a_main_version_among_the_sub_versions_is_refused_both_ways_naming_the_field(make):
    type_name = make({}).__class__.__name__
    with pytest.raises(ProtocolError) as encoding:
        encode(make({"main": 1}))
    with pytest.raises(ProtocolError) as decoding:
        decode(_with_field(encode(make({"searcher": 1})), "sub_versions", {"searcher": 1, "main": 1}))
    for caught in (encoding, decoding):
        assert caught.value.field == f"{type_name}.sub_versions"
        assert caught.value.problem == "'main' is not a sub-agent type"


def test_a_one_type_request_naming_sub_version_alone_is_refused():
    old = _with_field(encode(_request({"sub": 1})), "sub_version", 1)
    with pytest.raises(ProtocolError) as caught:
        decode(old)
    assert caught.value.field == "RolloutRequest.sub_version" and caught.value.problem == "unexpected field"
