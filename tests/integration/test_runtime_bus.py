"""The Bus and BusActor on a real nats-server: subjects delivered into an actor's mailbox, request/reply
with its three failure modes, queue groups spreading work, connection errors naming the URL."""

from __future__ import annotations

import collections
import threading
import time

import pytest

from mgrpo_actors.runtime import Bus, BusActor, BusConnectError, Delivery, NoResponders, RemoteFailure, RequestTimeout
from protocols import Metric, ProtocolError, ToolRequest, ToolResult
from tests.helpers import closed_port_url, wait_until

pytestmark = pytest.mark.integration


class Recorder(BusActor):
    """Listens on one subject and records every Metric it handles (with the thread that handled it)."""

    role = "test"

    def __init__(self, bus: Bus, subject: str, seen: list, queue: str = "") -> None:
        super().__init__(bus)
        self.subject, self.seen, self.queue = subject, seen, queue

    def on_start(self) -> None:
        super().on_start()
        self.listen(self.subject, queue=self.queue)

    def handlers(self) -> dict:
        return {Metric: self.on_metric}

    def on_metric(self, metric: Metric, delivery: Delivery) -> None:
        self.seen.append((delivery.subject, metric, threading.current_thread().name))


class ToolEcho(BusActor):
    """Answers ToolRequests: echoes, sleeps for `slow`, raises for `fail`."""

    role = "test"

    def __init__(self, bus: Bus, subject: str, queue: str = "", handled: list | None = None) -> None:
        super().__init__(bus)
        self.subject, self.queue = subject, queue
        self.handled_ids = handled if handled is not None else []

    def on_start(self) -> None:
        super().on_start()
        self.listen(self.subject, queue=self.queue)

    def handlers(self) -> dict:
        return {ToolRequest: self.on_request}

    def on_request(self, req: ToolRequest, delivery: Delivery) -> ToolResult:
        if req.tool == "slow":
            time.sleep(float(req.arguments["seconds"]))
        if req.tool == "fail":
            raise ValueError(f"tool exploded on {req.call_id}")
        if req.tool == "big":
            return ToolResult(call_id=req.call_id, ok=True, content="y" * int(req.arguments["size"]))
        self.handled_ids.append((self.name, req.call_id))
        return ToolResult(call_id=req.call_id, ok=True, content=f"{self.name}:{req.arguments.get('text', '')}")


def test_a_subject_is_delivered_into_the_actors_mailbox(bus, actors):
    seen: list = []
    subject = f"{bus.subjects.root}.work.metrics"
    ref = Recorder.start_ready(bus, subject, seen)
    actors.append(ref)
    for i in range(5):
        bus.publish(subject, Metric(name="m", value=float(i), step=i))
    wait_until(lambda: len(seen) == 5, what=lambda: f"seen {len(seen)} of 5")
    assert [m.step for _, m, _ in seen] == [0, 1, 2, 3, 4]  # one connection: order kept
    assert {s for s, _, _ in seen} == {subject}
    handler_threads = {t for _, _, t in seen}
    # the actor's own thread
    assert len(handler_threads) == 1 and not next(iter(handler_threads)).startswith("nats-bus")
    assert ref.proxy().handled.get() == 5
    assert ref.proxy().dead_letters.get() == 0


def test_wildcard_subscription_and_other_runs_stay_apart(bus, make_bus, actors):
    seen: list = []
    ref = Recorder.start_ready(bus, f"{bus.subjects.root}.metrics.>", seen)
    actors.append(ref)
    other = make_bus("other", run_id=f"{bus.run_id}x")
    other.publish(other.subjects.metrics("loss"), Metric(name="other-run", value=1.0))
    other.flush()
    bus.publish(bus.subjects.metrics("loss"), Metric(name="loss", value=1.0))
    bus.publish(bus.subjects.metrics("reward"), Metric(name="reward", value=2.0))
    wait_until(lambda: len(seen) == 2, what=lambda: f"seen {seen}")
    bus.flush()
    assert sorted(m.name for _, m, _ in seen) == ["loss", "reward"]


def test_request_reply(bus, actors):
    subject = bus.subjects.tool("echo")
    ref = ToolEcho.start_ready(bus, subject)
    actors.append(ref)
    reply = bus.request(subject, ToolRequest(call_id="c1", tool="echo", arguments={"text": "hé 🚀"}), timeout_s=5)
    assert isinstance(reply, ToolResult)
    assert reply.call_id == "c1" and reply.ok and reply.content.endswith(":hé 🚀")


def test_many_requests_in_flight(bus, actors):
    subject = bus.subjects.tool("echo")
    ref = ToolEcho.start_ready(bus, subject)
    actors.append(ref)
    futures = [
        bus.request_future(subject, ToolRequest(call_id=f"c{i}", tool="echo", arguments={"text": str(i)}), 10)
        for i in range(50)
    ]
    replies = [f.result(timeout=15) for f in futures]
    assert [r.call_id for r in replies] == [f"c{i}" for i in range(50)]


def test_request_timeout_when_the_responder_is_slow(bus, actors):
    subject = bus.subjects.tool("slowpoke")
    ref = ToolEcho.start_ready(bus, subject)
    actors.append(ref)
    with pytest.raises(RequestTimeout) as err:
        bus.request(subject, ToolRequest(call_id="late", tool="slow", arguments={"seconds": 1.0}), timeout_s=0.3)
    assert err.value.subject == subject and subject in str(err.value)
    # The actor is still alive and answers the next request once it has finished the slow one.
    reply = bus.request(subject, ToolRequest(call_id="next", tool="echo", arguments={}), timeout_s=10)
    assert reply.call_id == "next"


def test_no_responders_when_nobody_listens(bus):
    subject = bus.subjects.tool("nobody-home")
    with pytest.raises(NoResponders) as err:
        bus.request(subject, ToolRequest(call_id="c", tool="x", arguments={}), timeout_s=5)
    assert err.value.subject == subject and "no responders" in str(err.value)


def test_remote_failure_when_the_handler_raises(bus, actors):
    subject = bus.subjects.tool("fragile")
    ref = ToolEcho.start_ready(bus, subject)
    actors.append(ref)
    with pytest.raises(RemoteFailure) as err:
        bus.request(subject, ToolRequest(call_id="c-bad", tool="fail", arguments={}), timeout_s=5)
    assert err.value.error_type == "ValueError"
    assert "tool exploded on c-bad" in err.value.reason
    assert err.value.subject == subject
    # ... and the actor keeps serving.
    assert bus.request(subject, ToolRequest(call_id="c-ok", tool="echo", arguments={}), timeout_s=5).call_id == "c-ok"
    assert ref.proxy().dead_letters.get() == 1


def test_reply_that_does_not_decode_is_a_protocol_error(bus):
    subject = bus.subjects.tool("garbage")

    def answer_garbage(delivery: Delivery) -> None:
        bus.publish(delivery.reply, b"\xc1 not msgpack")

    bus.subscribe(subject, answer_garbage)
    with pytest.raises(ProtocolError) as err:
        bus.request(subject, ToolRequest(call_id="c", tool="x", arguments={}), timeout_s=5)
    assert err.value.field == "<payload>"


def test_queue_group_spreads_work_over_three_actors(make_bus, actors, run_id):
    client = make_bus("client")
    subject = client.subjects.tool("pool")
    handled: list = []
    for i in range(3):
        worker_bus = make_bus(f"worker-{i}")  # as if three processes
        ref = ToolEcho.start_ready(worker_bus, subject, queue="pool", handled=handled)
        actors.append(ref)
        worker_bus.flush()
    # A connection opened before a subscription elsewhere may see the subject as having no
    # responders for its first publish (nats-server 2.15, observed ~3% of runs); one round trip on the
    # client connection after the workers subscribed makes their interest visible to it.
    client.flush()
    n = 90
    futures = [
        client.request_future(subject, ToolRequest(call_id=f"job-{i}", tool="echo", arguments={}), 15) for i in range(n)
    ]
    replies = [f.result(timeout=20) for f in futures]
    assert sorted(r.call_id for r in replies) == sorted(f"job-{i}" for i in range(n))
    per_actor = collections.Counter(name for name, _ in handled)
    assert len(per_actor) == 3, f"not all three actors got work: {per_actor}"
    assert all(count > 0 for count in per_actor.values())
    assert sum(per_actor.values()) == n  # each request handled exactly once
    assert len({call_id for _, call_id in handled}) == n


def test_connect_to_a_closed_port_names_the_url():
    url = closed_port_url()
    bus = Bus(url, run_id="r1", connect_timeout_s=1.0)
    with pytest.raises(BusConnectError) as err:
        bus.connect()
    assert err.value.url == url and url in str(err.value)


def test_bus_refuses_an_invalid_run_id(nats_server):
    with pytest.raises(ValueError) as err:
        Bus(nats_server.url, run_id="bad.run")
    assert "bad.run" in str(err.value)


def test_decoded_replies_use_the_bus_size_limit(make_bus, actors):
    server_bus = make_bus("server")
    small = make_bus("small-client", max_bytes=512)
    subject = server_bus.subjects.tool("big")
    ref = ToolEcho.start_ready(server_bus, subject)
    actors.append(ref)
    small.flush()  # see test_queue_group_spreads_work_over_three_actors
    with pytest.raises(ProtocolError) as err:
        small.request(subject, ToolRequest(call_id="c", tool="big", arguments={"size": 2000}), timeout_s=5)
    assert "512" in err.value.problem
    assert (
        small.request(subject, ToolRequest(call_id="c", tool="big", arguments={"size": 100}), timeout_s=5).content
        == "y" * 100
    )
