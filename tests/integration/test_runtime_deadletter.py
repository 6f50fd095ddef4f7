"""Dead letters on a real nats-server: a message that does not decode, has no handler, or whose handler
raises goes to `mgrpo.<run>.dlq.<subject>` with the reason and the payload, is counted, and the actor
goes on with the next message; a requester gets RemoteFailure instead of a timeout."""

from __future__ import annotations

import msgpack
import pytest

from mgrpo_actors.runtime import Bus, BusActor, Delivery, RemoteFailure
from protocols import SCHEMA_VERSION, DeadLetter, Metric, ToolRequest, ToolResult, decode
from tests.helpers import wait_until

pytestmark = pytest.mark.integration


class Strict(BusActor):
    """Handles Metric (raises for name == 'boom') and ToolRequest (raises for tool == 'fail')."""

    role = "strict"

    def __init__(self, bus: Bus, subject: str, seen: list, stream: str = "", holder: dict | None = None) -> None:
        super().__init__(bus, name="strict-1")
        self.subject, self.seen, self.stream, self.holder = subject, seen, stream, holder

    def on_start(self) -> None:
        super().on_start()
        if self.stream:
            self.holder["consumer"] = self.consume(self.stream, "strict", batch=4)  # type: ignore[index]
        else:
            self.listen(self.subject)

    def handlers(self) -> dict:
        return {Metric: self.on_metric, ToolRequest: self.on_request}

    def on_metric(self, metric: Metric, delivery: Delivery) -> None:
        if metric.name == "boom":
            raise RuntimeError("metric boom")
        self.seen.append(metric.name)

    def on_request(self, req: ToolRequest, delivery: Delivery) -> ToolResult:
        if req.tool == "fail":
            raise KeyError("no such page")
        self.seen.append(req.call_id)
        return ToolResult(call_id=req.call_id, ok=True, content="fine")


class DlqWatch:
    """Collects the run's dead letters (decoded) from `mgrpo.<run>.dlq.>`."""

    def __init__(self, bus: Bus) -> None:
        self.letters: list[tuple[str, DeadLetter]] = []
        bus.subscribe(bus.subjects.dlq(), self._on)

    def _on(self, delivery: Delivery) -> None:
        self.letters.append((delivery.subject, decode(delivery.data)))


def _setup(bus: Bus, actors: list) -> tuple[str, list, DlqWatch]:
    subject = f"{bus.subjects.root}.work.metrics"
    seen: list = []
    dlq = DlqWatch(bus)
    actors.append(Strict.start_ready(bus, subject, seen))
    return subject, seen, dlq


def test_undecodable_message_is_dead_lettered_and_the_actor_goes_on(bus, actors):
    subject, seen, dlq = _setup(bus, actors)
    garbage = b"\xc1\x00 definitely not msgpack"
    bus.publish(subject, garbage)
    bus.publish(subject, Metric(name="after", value=1.0))
    wait_until(lambda: seen == ["after"] and len(dlq.letters) == 1, what=lambda: f"seen {seen}, letters {dlq.letters}")
    dlq_subject, letter = dlq.letters[0]
    assert dlq_subject == f"mgrpo.{bus.run_id}.dlq.work.metrics" == bus.subjects.dlq(subject)
    assert letter.subject == subject
    assert letter.payload == garbage
    assert letter.error_type == "ProtocolError"
    assert "<payload>" in letter.reason and "msgpack" in letter.reason
    assert letter.actor == "strict-1" and letter.node == bus.node and letter.failed_at > 0
    assert bus.dead_letters[subject] == 1 and bus.dead_letter_total == 1
    ref = actors[0]
    assert ref.proxy().dead_letters.get() == 1 and ref.proxy().handled.get() == 1


def test_invalid_field_is_dead_lettered_naming_the_field(bus, actors):
    subject, seen, dlq = _setup(bus, actors)
    bad = msgpack.packb({"v": SCHEMA_VERSION, "t": "Metric", "ts": 1.0, "d": {"name": "m"}}, use_bin_type=True)
    unknown_version = msgpack.packb(
        {"v": SCHEMA_VERSION + 1, "t": "Metric", "ts": 1.0, "d": {"name": "m", "value": 1.0}}, use_bin_type=True
    )
    bus.publish(subject, bad)
    bus.publish(subject, unknown_version)
    bus.publish(subject, Metric(name="good", value=2.0))
    wait_until(lambda: seen == ["good"] and len(dlq.letters) == 2, what=lambda: f"seen {seen}, letters {dlq.letters}")
    reasons = [letter.reason for _, letter in dlq.letters]
    assert "Metric.value" in reasons[0] and "missing" in reasons[0]
    assert "<envelope>.v" in reasons[1] and "version" in reasons[1]
    assert [letter.payload for _, letter in dlq.letters] == [bad, unknown_version]
    assert bus.dead_letters[subject] == 2


def test_message_without_a_handler_is_dead_lettered_naming_the_type(bus, actors):
    subject, seen, dlq = _setup(bus, actors)
    bus.publish(subject, ToolResult(call_id="c", ok=True, content="x"))
    bus.publish(subject, Metric(name="next", value=0.0))
    wait_until(lambda: seen == ["next"] and len(dlq.letters) == 1, what=lambda: f"seen {seen}, letters {dlq.letters}")
    letter = dlq.letters[0][1]
    assert letter.error_type == "NoHandler"
    assert "ToolResult" in letter.reason and "Metric" in letter.reason and "ToolRequest" in letter.reason


def test_handler_exception_dead_letters_and_the_requester_gets_remote_failure(bus, make_bus, actors):
    subject, seen, dlq = _setup(bus, actors)
    client = make_bus("client")
    with pytest.raises(RemoteFailure) as err:
        client.request(subject, ToolRequest(call_id="c-fail", tool="fail", arguments={}), timeout_s=5)
    assert err.value.error_type == "KeyError" and "no such page" in err.value.reason
    assert (
        client.request(subject, ToolRequest(call_id="c-ok", tool="visit", arguments={}), timeout_s=5).content == "fine"
    )
    bus.publish(subject, Metric(name="boom", value=0.0))
    bus.publish(subject, Metric(name="after-boom", value=0.0))
    wait_until(
        lambda: "after-boom" in seen and len(dlq.letters) == 2, what=lambda: f"seen {seen}, letters {dlq.letters}"
    )
    (_, first), (_, second) = dlq.letters
    assert first.error_type == "KeyError" and "no such page" in first.reason
    assert "test_runtime_deadletter.py" in first.reason  # where it was raised
    assert second.error_type == "RuntimeError" and "metric boom" in second.reason
    assert decode(first.payload) == ToolRequest(call_id="c-fail", tool="fail", arguments={})
    assert seen == ["c-ok", "after-boom"]
    assert bus.dead_letters[subject] == 2


def test_stream_message_that_fails_is_dead_lettered_and_terminated(bus, actors):
    stream = f"strict-{bus.run_id}"
    subject = f"{bus.subjects.root}.work.stream"
    bus.add_stream(stream, [subject])
    dlq = DlqWatch(bus)
    bus.js_publish(subject, b"\x92\x01\x02")  # valid msgpack (a list), not an envelope
    bus.js_publish(subject, Metric(name="boom", value=0.0))
    bus.js_publish(subject, Metric(name="ok", value=0.0))
    seen: list = []
    holder: dict = {}
    actors.append(Strict.start_ready(bus, subject, seen, stream=stream, holder=holder))
    consumer = holder["consumer"]
    wait_until(lambda: seen == ["ok"] and len(dlq.letters) == 2, what=lambda: f"seen {seen}, letters {dlq.letters}")
    wait_until(
        lambda: consumer.settled["term"] == 2 and consumer.settled["ack"] == 1,
        what=lambda: f"settled {dict(consumer.settled)}",
    )
    assert [letter.subject for _, letter in dlq.letters] == [subject, subject]
    assert "<envelope>" in dlq.letters[0][1].reason


def test_dead_letters_are_kept_in_the_runs_dlq_stream(bus, actors):
    bus.ensure_streams()
    subject, seen, _ = _setup(bus, actors)
    bus.publish(subject, b"junk")
    bus.publish(subject, Metric(name="go", value=0.0))
    wait_until(lambda: seen == ["go"])

    def stored() -> int:
        return bus.call(bus._js.stream_info(bus.subjects.stream("dlq"))).state.messages

    wait_until(lambda: stored() == 1, what=lambda: f"{stored()} messages in the dlq stream")


def test_oversized_message_is_dead_lettered_even_on_a_small_size_limit(make_bus, actors):
    # A node configured with a small nats.max_message_bytes still dead-letters (with the payload cut
    # to fit) and keeps running; the dead letter must never be larger than the bus can send.
    small = make_bus("small", max_bytes=16 * 1024)
    sender = make_bus("sender")
    subject = f"{small.subjects.root}.work.metrics"
    seen: list = []
    dlq = DlqWatch(small)  # on the publishing connection: no cross-connection interest race
    actors.append(Strict.start_ready(small, subject, seen))
    sender.publish(subject, Metric(name="x" * 20_000, value=0.0))
    sender.publish(subject, Metric(name="small-enough", value=0.0))
    wait_until(
        lambda: seen == ["small-enough"], timeout_s=5, what=lambda: f"seen {seen}; actor alive: {actors[0].is_alive()}"
    )
    wait_until(lambda: len(dlq.letters) == 1, what=lambda: f"letters {dlq.letters}")
    letter = dlq.letters[0][1]
    assert "limit" in letter.reason and letter.subject == subject
    assert 0 < len(letter.payload) <= 16 * 1024


def test_a_request_whose_reply_subject_is_not_an_inbox_is_refused_and_dead_lettered_once(bus, make_bus, actors):
    """Issue 8, reply-subject injection: a request naming a stream's subject (or a service's) as its
    reply must never make the node write there; it is dead-lettered once, unanswered."""
    subject, seen, dlq = _setup(bus, actors)
    client = make_bus("client")
    stream_subject = f"{bus.subjects.root}.traj.main"
    written: list = []
    client.subscribe(stream_subject, written.append)
    client.publish(subject, ToolRequest(call_id="c-inject", tool="visit", arguments={}), reply=stream_subject)
    # a reply to itself: no loop
    client.publish(subject, ToolRequest(call_id="c-loop", tool="visit", arguments={}), reply=subject)
    assert (
        client.request(subject, ToolRequest(call_id="c-ok", tool="visit", arguments={}), timeout_s=5).content == "fine"
    )
    wait_until(lambda: len(dlq.letters) == 2, what=lambda: f"letters {dlq.letters}")
    # later traffic: nothing more
    client.request(subject, ToolRequest(call_id="c-ok2", tool="visit", arguments={}), timeout_s=5)
    assert seen == ["c-ok", "c-ok2"] and written == []
    assert [letter.error_type for _, letter in dlq.letters] == ["BadReplySubject", "BadReplySubject"]
    assert stream_subject in dlq.letters[0][1].reason and "not an inbox" in dlq.letters[0][1].reason
    assert bus.dead_letters[subject] == 2
