"""`mgrpo-node --role monitor` as a real subprocess on a real nats-server: attached after a (fake) run
finished, it replays the run's metrics stream, shows every step, writes summary.json and rewards.png
and, with --until-finished, exits 0; attached mid-run, it replays what was, then follows the rest live.
It takes nothing from the stream and leaves no consumer behind."""

from __future__ import annotations

import json
import subprocess

import pytest

from mgrpo_actors.monitoring.publish import publish_event
from protocols import Event, decode
from tests.helpers import run_script, start_script, stop_process, wait_until
from tests.monitor_helpers import fake_run

pytestmark = pytest.mark.integration

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _publish(bus, messages) -> None:
    """The fake run's messages as the run's nodes publish them (events through publish_event)."""
    for message, _ in messages:
        if isinstance(message, Event):
            publish_event(bus, message.kind, message.message, "controller", **message.data)
        else:
            bus.publish(bus.subjects.query_done, message)
    bus.flush()


def _stored(bus) -> int:
    return bus.stream_info(bus.subjects.stream("metrics")).state.messages


def _monitor_args(nats_server, bus, tmp_path, name: str) -> list[str]:
    return [
        "--role",
        "monitor",
        "--until-finished",
        "--nats",
        nats_server.url,
        "--run-id",
        bus.run_id,
        "--name",
        name,
        "--set",
        f"run.dir={tmp_path}",
    ]


def _check_report(tmp_path, run_id: str, out: str) -> None:
    run_dir = tmp_path / run_id
    assert f"run report: {run_dir / 'summary.json'}, {run_dir / 'rewards.png'}" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [row["step"] for row in summary["steps"]] == [0, 1]
    assert [row["main_reward_mean"] for row in summary["steps"]] == [0.25, 0.5] and summary["steps"][1][
        "sub_clip_fraction"
    ] == 0.2
    assert (run_dir / "rewards.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.timeout(60)
def test_a_monitor_attached_after_the_run_replays_it_writes_the_report_and_exits(nats_server, bus, tmp_path):
    messages = fake_run(bus.run_id)
    bus.ensure_streams(["metrics"])
    _publish(bus, messages)
    wait_until(lambda: _stored(bus) == len(messages), timeout_s=10, what="the fake run is not stored")

    done = run_script("mgrpo-node", *_monitor_args(nats_server, bus, tmp_path, "mon-late"), timeout_s=50)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for step in (0, 1):
        assert f"step {step}: 2 queries × 2 rollouts" in out and f"step {step} finished in 9.0 s" in out
    assert "  step 0: R_M 0.250, R_S 0.100, M correct 0.250; d_k 1.50, D 8\n    clip M 0.050, S 0.150; tokens/s" in out
    assert "  step 1: R_M 0.500, R_S 0.300, M correct 0.500; d_k 2.00, D 8\n    clip M 0.100, S 0.200; tokens/s" in out
    assert f"run {bus.run_id} finished after 2 steps" in out and f"run '{bus.run_id}': 2 steps" in out
    _check_report(tmp_path, bus.run_id, out)

    # Nothing was taken from the stream (only the monitor's own node events were added) and no
    # durable consumer was left behind.
    events = _stored_events(bus)
    reported = [e for e in events if e.kind == "monitor.reported"]
    assert [e.node for e in reported] == ["mon-late"] and reported[0].data["files"][0].endswith("summary.json")
    assert len(events) - sum(e.node == "mon-late" for e in events) == sum(isinstance(m, Event) for m, _ in messages)
    consumers = bus.call(bus._js.consumers_info(bus.subjects.stream("metrics")))
    assert all(not c.config.durable_name for c in consumers), consumers


@pytest.mark.timeout(60)
def test_a_monitor_attached_mid_run_replays_what_was_then_follows_live(nats_server, bus, tmp_path):
    messages = fake_run(bus.run_id)
    first_step = [(m, at) for m, at in messages if at < 10.0]
    bus.ensure_streams(["metrics"])
    _publish(bus, first_step)
    log = tmp_path / "monitor.out"
    with log.open("w") as out_file:
        proc = start_script("mgrpo-node", *_monitor_args(nats_server, bus, tmp_path, "mon-live"), stdout=out_file)
        try:
            wait_until(
                lambda: "  step 0: R_M 0.250" in log.read_text() or proc.poll() is not None,
                timeout_s=30,
                interval_s=0.1,
            )
            assert proc.poll() is None, log.read_text()[-3000:]  # not finished: it waits for the run
            _publish(bus, messages[len(first_step) :])
            assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the monitor did not stop on run.finished: {log.read_text()[-3000:]}") from None
        finally:
            stop_process(proc)
    out = log.read_text()
    assert "  step 1: R_M 0.500, R_S 0.300" in out and f"run {bus.run_id} finished after 2 steps" in out
    _check_report(tmp_path, bus.run_id, out)


def _stored_events(bus) -> list[Event]:
    """Every event the metrics stream holds (an ephemeral pull consumer: a limits stream keeps them)."""

    async def read() -> list[Event]:
        psub = await bus._js.pull_subscribe(bus.subjects.events, stream=bus.subjects.stream("metrics"))
        msgs = await psub.fetch(100, timeout=2)
        await psub.unsubscribe()
        return [decode(m.data) for m in msgs]

    return bus.call(read())
