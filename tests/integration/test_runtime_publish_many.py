"""`Bus.js_publish_many` on a real nats-server: every item stored in the order given with its stream sequence, one
item's failure (no stream takes its subject, a message that cannot be encoded) only that item's, de-duplication ids
honoured as `js_publish` honours them."""

from __future__ import annotations

import pytest

from mgrpo_actors.runtime import Bus
from protocols import Metric
from tests.pipeline_helpers import read_stream

pytestmark = pytest.mark.integration


def _stream(bus: Bus) -> tuple[str, str]:
    stream, subject = f"many-{bus.run_id}", f"{bus.subjects.root}.many"
    bus.add_stream(stream, [subject])
    return stream, subject


def test_items_are_stored_in_the_order_given_with_their_sequences(bus):
    stream, subject = _stream(bus)
    bus.js_publish(subject, Metric(name="before", value=0.0, step=0))
    items = [(subject, Metric(name="job", value=float(i), step=i), None) for i in range(40)]
    assert bus.js_publish_many(items) == list(range(2, 42))
    stored = read_stream(bus, stream)
    assert [m.name for m in stored] == ["before", *["job"] * 40]
    assert [m.step for m in stored[1:]] == list(range(40))


def test_an_items_failure_is_that_items_alone(bus):
    stream, subject = _stream(bus)
    nowhere = f"{bus.subjects.root}.no-stream-takes-this"
    results = bus.js_publish_many(
        [
            (subject, Metric(name="a", value=1.0, step=1), None),
            (nowhere, Metric(name="lost", value=2.0, step=2), None),
            (subject, object(), None),  # not a protocol message: cannot be encoded
            (subject, Metric(name="b", value=3.0, step=3), None),
        ]
    )
    assert results[0] == 1 and results[3] == 2
    assert isinstance(results[1], Exception) and isinstance(results[2], Exception)
    assert [m.name for m in read_stream(bus, stream)] == ["a", "b"]


def test_de_duplication_ids_are_honoured(bus):
    stream, subject = _stream(bus)
    first = bus.js_publish(subject, Metric(name="once", value=1.0, step=1), msg_id="same")
    results = bus.js_publish_many(
        [
            (subject, Metric(name="once", value=1.0, step=1), "same"),  # a duplicate: acked, not stored again
            (subject, Metric(name="other", value=2.0, step=2), "other"),
        ]
    )
    assert results == [first, first + 1]
    assert [m.name for m in read_stream(bus, stream)] == ["once", "other"]


def test_nothing_to_publish_returns_nothing(bus):
    assert bus.js_publish_many([]) == []


def test_items_whose_stream_was_deleted_under_the_node_are_stored_once_it_is_recreated(bus):
    bus.ensure_streams(["stats", "traj-main"])
    bus.call(bus._js.delete_stream(bus.subjects.stream("stats")))
    results = bus.js_publish_many(
        [
            (bus.subjects.trajectories("main"), b"kept", None),
            (bus.subjects.reward_stats, b"after the loss", "s-1"),
            (bus.subjects.reward_stats, b"and another", "s-2"),
        ]
    )
    assert results == [1, 1, 2]
    assert bus.stream_info(bus.subjects.stream("stats")).state.messages == 2


def test_a_store_at_its_limit_fails_its_items_as_the_single_publish_does(bus):
    stream, subject = f"tight-{bus.run_id}", f"{bus.subjects.root}.tight"
    bus.call(bus._js.add_stream(name=stream, subjects=[subject], max_msgs=2, discard="new"))
    results = bus.js_publish_many([(subject, f"m{i}".encode(), None) for i in range(3)])
    assert results[:2] == [1, 2] and isinstance(results[2], Exception)
    with pytest.raises(Exception) as single:
        bus.js_publish(subject, b"one more")
    assert type(results[2]) is type(single.value) and "maximum messages" in str(results[2])


def test_a_recreate_that_fails_fails_the_lost_items_alone(bus):
    import nats.js.errors

    bus.ensure_streams(["stats", "traj-main"])
    bus.call(bus._js.delete_stream(bus.subjects.stream("stats")))

    async def refused(why: str) -> None:  # a permissions or API error while recreating
        raise nats.js.errors.APIError(description="denied")

    bus._recreate_streams = refused
    results = bus.js_publish_many(
        [(bus.subjects.trajectories("main"), b"kept", None), (bus.subjects.reward_stats, b"lost", "s-1")]
    )
    assert results[0] == 1 and isinstance(results[1], nats.js.errors.APIError)
    assert bus.stream_info(bus.subjects.stream("traj-main")).state.messages == 1
