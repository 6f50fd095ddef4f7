"""`mgrpo-node --health-file PATH` (the Kubernetes probes of deploy/k8s/ read it): written with the
current time while the node runs and is connected, refreshed, and removed when the node stops."""

from __future__ import annotations

import time

import pytest

from tests.helpers import start_script, stop_process, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_the_health_file_is_fresh_while_the_node_runs_and_gone_after_it_stops(nats_server, tmp_path):
    health = tmp_path / "health"
    node = start_script(
        "mgrpo-node",
        "--role",
        "tool",
        "--nats",
        nats_server.url,
        "--run-id",
        "health",
        "--set",
        "tools.web_entities=100",
        "--health-file",
        str(health),
        stdout=open(tmp_path / "node.log", "w"),
    )
    try:
        wait_until(health.exists, timeout_s=60, what=lambda: (tmp_path / "node.log").read_text()[-2000:])
        first = int(health.read_text())
        assert abs(first - time.time()) < 10
        wait_until(
            lambda: int(health.read_text()) > first,
            timeout_s=15,
            interval_s=0.5,
            what="the health file was not refreshed",
        )
        node.terminate()
        assert node.wait(30) == 0
        assert not health.exists()
    finally:
        stop_process(node)


def test_the_health_file_goes_stale_while_nats_is_gone(tmp_path):
    """What the liveness probe relies on: no NATS connection, no fresh heartbeat (the node keeps
    trying to reconnect meanwhile; the probe's restart is the supervisor's answer)."""
    from mgrpo_actors.runtime import EmbeddedNats

    server = EmbeddedNats().start()
    health = tmp_path / "health"
    node = start_script(
        "mgrpo-node",
        "--role",
        "tool",
        "--nats",
        server.url,
        "--run-id",
        "health",
        "--set",
        "tools.web_entities=100",
        "--set",
        "nats.reconnect_wait_s=0.2",
        "--health-file",
        str(health),
        stdout=open(tmp_path / "node.log", "w"),
    )
    try:
        wait_until(health.exists, timeout_s=60, what=lambda: (tmp_path / "node.log").read_text()[-2000:])
        server.kill()
        time.sleep(1.0)  # a beat already under way may still land
        last = int(health.read_text())
        time.sleep(11)  # two beats' time
        assert int(health.read_text()) == last  # not refreshed while disconnected
        assert time.time() - last > 10
    finally:
        stop_process(node)
        server.stop()
