"""`mgrpo tap` and `mgrpo ping` as real subprocesses against a real nats-server: tap prints what another
process publishes as JSON lines (arrays as dtype/shape, bytes as length, undecodable messages with their
error), replays a JetStream stream, and both fail clearly when NATS or the stream is not there."""

from __future__ import annotations

import json
import time
from datetime import datetime

import numpy as np
import pytest

from mgrpo_actors.runtime import NoResponders, RequestTimeout
from protocols import DeadLetter, Event, Metric, Trajectory
from tests.helpers import closed_port_url, run_script, start_script, stop_process, wait_until

pytestmark = pytest.mark.integration


def _trajectory(run_id: str) -> Trajectory:
    return Trajectory(
        run_id=run_id,
        side="sub",
        step=2,
        query_id="q7",
        rollout_index=1,
        call_id="call-3",
        policy_version=4,
        token_ids=np.arange(7, dtype=np.int32),
        loss_mask=np.ones(7, np.uint8),
        logprobs=np.zeros(7, np.float32),
        format_error="ünïcode",
    )


def _wait_until_subscribed(bus, proc, subject: str) -> None:
    """Request on `subject` until someone (the tap) is subscribed: NoResponders before, a timeout after.
    Exactly one probe reaches the tap (a request nobody is subscribed to is delivered to nobody)."""

    def subscribed() -> bool:
        assert proc.poll() is None, f"tap exited with {proc.returncode}: {proc.stderr.read()}"
        try:
            bus.request(subject, Event(kind="probe", message="are you there"), timeout_s=0.3)
        except NoResponders:
            return False
        except RequestTimeout:
            return True
        raise AssertionError("the tap answered a request")

    wait_until(subscribed, timeout_s=30, interval_s=0.05, what="tap never subscribed")


def test_tap_prints_what_another_process_publishes(nats_server, bus):
    root = bus.subjects.root
    messages = [
        (f"{root}.metrics.loss", Metric(name="loss", value=0.25, step=3, tags={"side": "main"})),
        (bus.subjects.trajectories("sub"), _trajectory(bus.run_id)),
        (
            f"{root}.dlq.x",
            DeadLetter(subject=f"{root}.x", reason="bad", error_type="ProtocolError", payload=b"\x00" * 11),
        ),
        (f"{root}.junk", b"\xc1 not msgpack"),
    ]
    proc = start_script(
        "mgrpo", "tap", f"{root}.>", "--nats", nats_server.url, "--count", str(len(messages) + 1), "--duration", "60"
    )
    try:
        _wait_until_subscribed(bus, proc, f"{root}.probe")
        published_at = time.time()
        for subject, message in messages:
            bus.publish(subject, message)
        bus.flush()
        out, err = proc.communicate(timeout=30)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == len(messages) + 1, out
    probe, metric, traj, letter, junk = lines
    assert (probe["subject"], probe["type"], probe["payload"]["kind"]) == (f"{root}.probe", "Event", "probe")

    assert metric["subject"] == f"{root}.metrics.loss" and metric["type"] == "Metric"
    assert metric["payload"] == {
        "name": "loss",
        "value": 0.25,
        "step": 3,
        "node": "",
        "role": "",
        "tags": {"side": "main"},
    }
    sent = datetime.fromisoformat(metric["time"])
    assert sent.tzinfo is not None and abs(sent.timestamp() - published_at) < 3600

    assert traj["type"] == "Trajectory" and traj["subject"] == f"{root}.traj.sub"
    assert traj["payload"]["token_ids"] == {"dtype": "int32", "shape": [7]}
    assert traj["payload"]["loss_mask"] == {"dtype": "uint8", "shape": [7]}
    assert traj["payload"]["logprobs"] == {"dtype": "float32", "shape": [7]}
    assert traj["payload"]["format_error"] == "ünïcode" and traj["payload"]["call_id"] == "call-3"

    assert letter["type"] == "DeadLetter" and letter["payload"]["payload"] == {"bytes": 11}

    assert junk["subject"] == f"{root}.junk" and "type" not in junk
    assert "<payload>" in junk["error"] and junk["size"] == len(messages[-1][1])


def test_tap_replays_a_stream_from_the_start(nats_server, bus):
    stream = f"replay-{bus.run_id}"
    subjects = [f"{bus.subjects.root}.replay.{'a' if i % 2 else 'b'}" for i in range(6)]
    bus.add_stream(stream, [f"{bus.subjects.root}.replay.>"])
    for i, subject in enumerate(subjects):
        bus.js_publish(subject, Metric(name="stored", value=float(i), step=i))
    result = run_script(
        "mgrpo",
        "tap",
        "--stream",
        stream,
        "--from-start",
        "--count",
        "6",
        "--duration",
        "30",
        "--nats",
        nats_server.url,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["subject"], line["payload"]["step"]) for line in lines] == list(zip(subjects, range(6)))
    assert all(line["type"] == "Metric" for line in lines)

    only_a = run_script(
        "mgrpo",
        "tap",
        f"{bus.subjects.root}.replay.a",
        "--stream",
        stream,
        "--from-start",
        "--count",
        "3",
        "--duration",
        "30",
        "--nats",
        nats_server.url,
    )
    assert only_a.returncode == 0, only_a.stderr
    assert [json.loads(line)["payload"]["step"] for line in only_a.stdout.splitlines()] == [1, 3, 5]


def test_tap_of_a_missing_stream_exits_2_naming_it(nats_server):
    result = run_script(
        "mgrpo", "tap", "--stream", "no-such-stream", "--from-start", "--count", "1", "--nats", nats_server.url
    )
    assert result.returncode == 2
    assert "no-such-stream" in result.stderr


def test_tap_with_unreachable_nats_exits_3_naming_the_url():
    url = closed_port_url()
    result = run_script("mgrpo", "tap", "--count", "1", "--nats", url, timeout_s=60)
    assert result.returncode == 3
    assert url in result.stderr and "cannot reach NATS" in result.stderr
    assert "Traceback" not in result.stderr, (
        "an unreachable server is an expected condition: one clear line, no tracebacks"
    )


def test_ping_without_nodes_exits_1_saying_so(nats_server, run_id):
    result = run_script("mgrpo", "ping", "--nats", nats_server.url, "--run-id", run_id, "--wait", "0.3")
    assert result.returncode == 1
    assert run_id in result.stderr and "no node" in result.stderr


def test_ping_with_unreachable_nats_exits_3_naming_the_url():
    url = closed_port_url()
    result = run_script("mgrpo", "ping", "--nats", url, timeout_s=60)
    assert result.returncode == 3
    assert url in result.stderr and "cannot reach NATS" in result.stderr
    assert "Traceback" not in result.stderr, (
        "an unreachable server is an expected condition: one clear line, no tracebacks"
    )
