"""Failure paths of the runtime: what must be dead-lettered, refused or given back, never lost or hung."""

from __future__ import annotations

import subprocess
import time

import pytest

from mgrpo_actors.runtime import (
    Bus,
    BusActor,
    BusError,
    Delivery,
    EmbeddedNats,
    KvUpdate,
    RemoteFailure,
    nats_server_binary,
)
from protocols import DeadLetter, Metric, NodePing, ToolRequest, ToolResult, decode
from tests.helpers import run_script, start_script, stop_process, wait_until

pytestmark = pytest.mark.integration


class BadReplier(BusActor):
    """Replies with something that cannot be encoded when asked for `bad`."""

    def on_start(self) -> None:
        super().on_start()
        self.listen(self.bus.subjects.tool("bad"))

    def handlers(self) -> dict:
        return {ToolRequest: self.on_request}

    def on_request(self, req: ToolRequest, delivery: Delivery) -> ToolResult:
        if req.arguments.get("bad"):
            return ToolResult(call_id=req.call_id, ok=True, content="x" * (2 * self.bus.max_bytes))  # over the limit
        return ToolResult(call_id=req.call_id, ok=True, content="fine")

    def on_kv_update(self, update: KvUpdate) -> None:
        raise RuntimeError("kv handler broke")


def test_a_reply_that_cannot_be_encoded_is_dead_lettered_and_the_actor_goes_on(bus, make_bus, actors):
    server = make_bus("server", max_bytes=64 * 1024)
    actor = BadReplier.start_ready(server)
    actors.append(actor)
    subject = bus.subjects.tool("bad")
    with pytest.raises(RemoteFailure) as err:
        bus.request(subject, ToolRequest(call_id="1", tool="bad", arguments={"bad": True}), timeout_s=5)
    assert "ProtocolError" in err.value.error_type and "exceeds the limit" in err.value.reason
    assert bus.request(subject, ToolRequest(call_id="2", tool="bad", arguments={}), timeout_s=5).content == "fine"
    assert actor.is_alive() and server.dead_letter_total == 1


def test_a_failing_kv_watch_handler_does_not_kill_the_actor(bus, make_bus, actors, run_id):
    server = make_bus("server")
    actor = BadReplier.start_ready(server)
    actors.append(actor)
    bucket = server.kv(f"kv-{run_id}")
    stop_watch = bucket.watch(">", actor)
    bucket.put("a", b"1")
    bucket.put("b", b"2")
    wait_until(lambda: actor.proxy().dead_letters.get() >= 2, what="both updates reached the handler")
    assert (
        bus.request(bus.subjects.tool("bad"), ToolRequest(call_id="3", tool="bad", arguments={}), timeout_s=5).content
        == "fine"
    )
    stop_watch()


def test_requests_and_publishes_after_close_fail_at_once(nats_server, run_id):
    bus = Bus(nats_server.url, run_id=run_id).connect()
    bus.close()
    started = time.monotonic()
    with pytest.raises(BusError):
        bus.request(bus.subjects.node_ping, NodePing(), timeout_s=0.5)
    with pytest.raises(BusError):
        bus.publish(bus.subjects.events, NodePing())
    assert time.monotonic() - started < 2


class Everything(BusActor):
    """Listens to the whole run (what a monitor does) and fails on every message."""

    def on_start(self) -> None:
        super().on_start()
        self.listen(self.bus.subjects.all)

    def handlers(self) -> dict:
        return {Metric: self.on_metric}

    def on_metric(self, metric: Metric, delivery: Delivery) -> None:
        raise ValueError("cannot handle metrics")


def test_a_wildcard_listener_does_not_dead_letter_dead_letters_forever(bus, make_bus, actors):
    server = make_bus("server")
    letters: list = []
    bus.subscribe(bus.subjects.dlq(), letters.append)
    actors.append(Everything.start_ready(server))
    bus.publish(bus.subjects.metrics("loss"), Metric(name="loss", value=1.0))
    wait_until(lambda: letters, what="the first dead letter")
    time.sleep(1.0)  # a loop would produce hundreds by now
    assert len(letters) == 1
    letter = decode(letters[0].data)
    assert isinstance(letter, DeadLetter) and letter.subject == bus.subjects.metrics("loss")


def test_slow_handler_within_ack_wait_is_handled_exactly_once(bus, make_bus, actors, run_id):
    stream, subject = f"slow-{run_id}", f"{bus.subjects.root}.slow"
    bus.add_stream(stream, [subject])
    for i in range(6):
        bus.js_publish(subject, Metric(name="job", value=float(i), step=i))
    seen: list[tuple[int, int]] = []

    class Slow(BusActor):
        def on_start(self) -> None:
            super().on_start()
            # batch x handler time (2 x 0.3 s) stays under ack_wait: nothing waits in the mailbox past it
            self.consume(stream, "slow", batch=2, ack_wait_s=1.0)

        def handlers(self) -> dict:
            return {Metric: self.on_job}

        def on_job(self, job: Metric, delivery: Delivery) -> None:
            seen.append((job.step, delivery.num_delivered))
            time.sleep(0.3)

    actors.append(Slow.start_ready(make_bus("worker")))
    wait_until(lambda: len(seen) >= 6, timeout_s=20, what=lambda: f"seen {seen}")
    time.sleep(1.5)  # would-be redeliveries after ack_wait
    assert sorted(step for step, _ in seen) == list(range(6)) and all(n == 1 for _, n in seen)


def test_embedded_server_reusing_a_store_dir_reports_its_new_port(tmp_path):
    first = EmbeddedNats(store_dir=str(tmp_path)).start()
    first_port = first.port
    first.stop()
    second = EmbeddedNats(store_dir=str(tmp_path)).start()
    try:
        # The old server's "Listening on ..." line must not be taken for the new one's.
        with Bus(second.url, run_id="reuse") as bus:
            assert bus.connected
        assert f":{first_port}" not in second.log_tail(200) or second.port == first_port
    finally:
        second.stop()


def test_node_with_a_server_without_jetstream_exits_3_saying_so(tmp_path):
    proc = subprocess.Popen(
        [str(nats_server_binary()), "-a", "127.0.0.1", "-p", "-1", "-l", str(tmp_path / "log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def port() -> int | None:
            text = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
            marker = "Listening for client connections on 127.0.0.1:"
            return int(text.split(marker, 1)[1].split()[0]) if marker in text else None

        url = f"nats://127.0.0.1:{wait_until(port, what='plain nats-server up')}"
        done = run_script(
            "mgrpo-node", "--role", "tool", "--nats", url, "--set", "tools.web_entities=100", timeout_s=60
        )
        assert done.returncode == 3 and "JetStream is not enabled" in done.stderr, done.stderr[-2000:]
    finally:
        proc.terminate()
        proc.wait(10)


def test_node_exits_3_when_nats_is_gone_for_good(tmp_path):
    server = EmbeddedNats(store_dir=str(tmp_path / "store")).start()
    node = start_script(
        "mgrpo-node",
        "--role",
        "tool",
        "--nats",
        server.url,
        "--set",
        "tools.web_entities=100",
        "--set",
        "nats.max_reconnect_attempts=2",
        "--set",
        "nats.reconnect_wait_s=0.2",
    )
    try:
        with Bus(server.url, run_id="default") as bus:
            wait_until(lambda: _serves_search(bus), timeout_s=60, what="the node's tool actors are up")
        server.kill()
        assert node.wait(timeout=30) == 3
        assert "reconnect attempts used up" in node.stderr.read()
    finally:
        stop_process(node)
        server.stop()


def _serves_search(bus: Bus) -> bool:
    try:
        return (
            bus.request(
                bus.subjects.tool("search"),
                ToolRequest(call_id="up", tool="search", arguments={"query": "x"}),
                timeout_s=1,
            )
            is not None
        )
    except BusError:
        return False


@pytest.mark.parametrize(
    "setting",
    [
        "tools.serve=[searchh]",
        "tools.pages=/nope.jsonl",
        "tools.web_entities=50",
        "tools.serve=[search, 'my tool']",
        "tools.actors_per_tool=100000",
        "tools.web_entities=100000000",
    ],
)
def test_bad_tool_settings_exit_2_before_connecting(setting):
    done = run_script("mgrpo-node", "--role", "tool", "--set", setting, "--nats", "nats://127.0.0.1:1", timeout_s=30)
    assert done.returncode == 2 and "tools." in done.stderr and "Traceback" not in done.stderr, done.stderr
