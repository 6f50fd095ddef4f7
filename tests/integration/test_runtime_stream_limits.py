"""The run's streams are bounded and come back when the server loses them (issue 8, finding 4), on a
real nats-server: the dead-letter and metrics streams keep at most their configured count and drop
their oldest; a work stream that is full refuses new messages (its publisher sees an error) rather
than drop any; a stream deleted under a node, or lost with a restarted server's store, is created again
by the node (on its next publish, or when it reconnects) instead of publishing into nothing."""

from __future__ import annotations

import shutil

import pytest

from mgrpo_actors.runtime import Bus, Delivery, EmbeddedNats, StreamLimits
from protocols import Metric
from tests.helpers import wait_until

pytestmark = pytest.mark.integration


def _messages(bus: Bus, what: str) -> tuple[int, int]:
    """(messages kept, last sequence) of the run's stream `what`."""
    state = bus.stream_info(bus.subjects.stream(what)).state
    return state.messages, state.last_seq


def test_the_dead_letter_stream_keeps_its_newest_up_to_its_limit(bus):
    bus.ensure_streams(["dlq"], StreamLimits(max_msgs={"dlq": 5}))
    for i in range(20):
        bus.dead_letter(
            Delivery(f"{bus.subjects.root}.node.ping", f"garbage {i}".encode(), "", None), "not msgpack", "DecodeError"
        )
    assert wait_until(lambda: _messages(bus, "dlq") == (5, 20), 10, what="the 5 newest of 20 dead letters kept")


def test_a_full_work_stream_refuses_new_messages_and_drops_none(bus):
    bus.ensure_streams(["batch-main"], StreamLimits(max_msgs={"batch-main": 2}))
    subject = bus.subjects.batches("main")
    bus.js_publish(subject, b"first")
    bus.js_publish(subject, b"second")
    with pytest.raises(Exception, match="maximum messages"):
        bus.js_publish(subject, b"third")
    assert _messages(bus, "batch-main") == (2, 2)  # the two unread ones are still there


def test_a_stream_deleted_under_a_node_is_recreated_by_its_next_publish(bus):
    bus.ensure_streams(["stats"])
    name = bus.subjects.stream("stats")
    bus.call(bus._js.delete_stream(name))
    seq = bus.js_publish(bus.subjects.reward_stats, b"after the loss")
    assert seq == 1 and _messages(bus, "stats") == (1, 1)


def test_streams_lost_with_a_restarted_servers_store_come_back_on_reconnect(tmp_path):
    store = tmp_path / "store"
    server = EmbeddedNats(store_dir=str(store)).start()
    port = server.port
    bus = Bus(server.url, run_id="lost-store", node="ls", reconnect_wait_s=0.2, max_reconnect_attempts=100).connect()
    try:
        bus.ensure_streams(["metrics", "dlq"], StreamLimits(max_msgs={"dlq": 7}))
        server.kill()
        shutil.rmtree(store)  # the server comes back with nothing
        server = EmbeddedNats(port=port, store_dir=str(store)).start()
        wait_until(lambda: bus.reconnects >= 1 and bus.connected, 20, what="bus reconnected")

        def recreated() -> bool:
            # the node recreates its streams one by one (in name order): wait for both, not the first
            try:
                bus.stream_info(bus.subjects.stream("metrics"))
                return bus.stream_info(bus.subjects.stream("dlq")).config.max_msgs == 7
            except Exception:
                return False

        assert wait_until(recreated, 10, what="the metrics and dlq streams recreated, dlq with its limits")
        # a core publish: lands only if the stream exists
        bus.publish(bus.subjects.metrics("after"), Metric(name="after", value=1.0))
        assert wait_until(lambda: _messages(bus, "metrics")[0] == 1, 10, what="the metric stored")
    finally:
        bus.close()
        server.stop()
