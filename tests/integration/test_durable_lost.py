"""A role whose durable consumer is deleted under it stops the run (issue 23, "a deleted consumer ... hung the run
forever"; runtime/consumer.py `_gone`): on a real nats-server, `mgrpo-node --role main-aligner` exits 3 once the
server has said "not found" for DURABLE_LOST_AFTER_S (15 s), with one last line naming the durable and its
stream, instead of retrying "consumer fetch failed" for ever."""

from __future__ import annotations

import time

import pytest

from mgrpo_actors.runtime.consumer import DURABLE_LOST_AFTER_S
from protocols.durables import DURABLES
from tests.pipeline_helpers import EventLog, NodeProcesses, pipeline_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_deleted_durable_stops_the_node_with_exit_3_naming_it(nats_server, tmp_path, make_bus, run_id):
    bus = make_bus("test")
    events = EventLog(bus)
    config = pipeline_config(tmp_path, run_id)
    nodes = NodeProcesses(nats_server.url, config, tmp_path / "logs")
    stream, durable, _ = DURABLES["main-aligner"].where(bus.subjects)
    try:
        node = nodes.start("aligner", "main-aligner")
        events.wait_for("node.started", timeout_s=60, describe=lambda: nodes.output("aligner")[-2000:])
        bus.call(bus._js.delete_consumer(stream, durable))
        deleted = time.monotonic()
        code = node.wait(timeout=DURABLE_LOST_AFTER_S + 60)
        waited = time.monotonic() - deleted
    finally:
        nodes.stop_all()
    output = nodes.output("aligner")
    assert code == 3, output[-3000:]
    assert DURABLE_LOST_AFTER_S <= waited < DURABLE_LOST_AFTER_S + 45, waited  # the window, then the node's stop
    last_line = output.strip().splitlines()[-1]
    assert last_line.startswith(
        f"mgrpo-node: error: run stopped: durable consumer {durable!r} of stream {stream!r} no longer exists"
    ), last_line
    assert "Traceback" not in output
