"""Floods on a real nats-server (issue 8, finding 3): a subscription keeps at most `mailbox_limit` of its
deliveries in its actor's mailbox and makes nats-py hold the rest (backpressure), so a burst of valid
requests is served whole with bounded memory; when even nats-py's queue is full the messages it drops
are counted, logged and published as the metric bus.slow_consumer_drops, never lost silently; and
what a request may make a node echo back is bounded."""

from __future__ import annotations

import threading
import time

import pytest

from mgrpo_actors.runtime import Bus, BusActor, Delivery
from mgrpo_actors.runtime.slow_consumers import SLOW_CONSUMER_METRIC
from protocols import Metric, NodeInfo, NodePing, ProtocolError, ToolRequest, decode, encode
from tests.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class SlowPong(BusActor):
    """Answers pings after `delay_s`; records the most deliveries it ever saw waiting in its mailbox."""

    def __init__(
        self, bus: Bus, delay_s: float, entered: threading.Event | None = None, gate: threading.Event | None = None
    ) -> None:
        super().__init__(bus, name="slow-pong")
        self.delay_s, self.most_waiting, self.answered = delay_s, 0, 0
        # When given, a ping sets `entered` and waits for `gate`: the actor is busy as long as the test says.
        self.entered, self.gate = entered, gate

    def on_start(self) -> None:
        super().on_start()
        self.listen(self.bus.subjects.node_ping)

    def handlers(self) -> dict:
        return {NodePing: self.on_ping}

    def on_ping(self, ping: NodePing, delivery: Delivery) -> NodeInfo:
        self.most_waiting = max(self.most_waiting, self.actor_inbox.qsize())
        if self.entered is not None:
            self.entered.set()
        if self.gate is not None:
            self.gate.wait(60)
        time.sleep(self.delay_s)
        self.answered += 1
        return NodeInfo(node="slow", roles=[], versions={}, uptime_s=0.0, pid=0, host="")


def test_a_burst_of_valid_requests_is_served_whole_with_a_bounded_mailbox(make_bus):
    server = make_bus("server", mailbox_limit=8)
    client = make_bus("client")
    actor = SlowPong.start_ready(server, delay_s=0.002)
    try:
        futures = [client.request_future(client.subjects.node_ping, NodePing(), timeout_s=60) for _ in range(300)]
        replies = [f.result(70) for f in futures]
        assert all(isinstance(r, NodeInfo) for r in replies) and len(replies) == 300  # none lost, none timed out
        assert actor.proxy().most_waiting.get() <= 8  # the other requests waited in nats-py, not in the mailbox
        assert server.slow_consumers.total == 0
    finally:
        actor.stop()


def test_what_nats_py_must_drop_is_counted_logged_and_published(make_bus):
    # A mailbox of 1 and a 2 MB nats-py queue behind an actor held busy by a first ping: 60 × 1 MB of
    # garbage cannot all wait, whatever the machine's speed; the drops are counted.
    server = make_bus("server", mailbox_limit=1, pending_bytes_limit=2 * 1024 * 1024)
    watcher = make_bus("watcher")
    seen: list[Metric] = []
    watcher.subscribe(watcher.subjects.metrics(SLOW_CONSUMER_METRIC), lambda d: seen.append(decode(d.data)))
    entered, busy = threading.Event(), threading.Event()
    actor = SlowPong.start_ready(server, delay_s=0.0, entered=entered, gate=busy)
    flooder = make_bus("flooder")
    try:
        flooder.publish(flooder.subjects.node_ping, encode(NodePing()))
        assert entered.wait(10), "the first ping never reached the actor"
        garbage = b"\x00" * (1024 * 1024)
        for _ in range(60):
            flooder.publish(flooder.subjects.node_ping, garbage)
        assert wait_until(lambda: server.slow_consumers.total > 0, 20, what="drops counted")
        busy.set()
        assert wait_until(lambda: seen and seen[-1].value >= 1, 10, what="the slow-consumer metric published")
        assert seen[-1].node == server.node and seen[-1].tags["subject"] == server.subjects.node_ping
        # Every message is accounted for: answered (the ping), dead-lettered (not msgpack) or counted as dropped.
        assert wait_until(
            lambda: server.dead_letter_total + server.slow_consumers.total == 60,
            30,
            what=lambda: f"dead letters {server.dead_letter_total} + drops {server.slow_consumers.total} == 60",
        )
        assert actor.proxy().answered.get() == 1
    finally:
        busy.set()
        actor.stop()


def test_a_request_cannot_make_a_node_echo_megabytes():
    with pytest.raises(ProtocolError, match="ToolRequest.tool: 20000000 characters, more than 256"):
        encode(ToolRequest(call_id="c1", tool="x" * 20_000_000, arguments={}), max_bytes=64 * 1024 * 1024)
    with pytest.raises(ProtocolError, match="exceeds max_map_len"):
        decode(encode(Metric(name="m", value=1.0, tags={f"k{i}": "v" for i in range(200_000)})))
