"""Issue 8, finding 1: one raw message whose reply subject is not valid UTF-8 kills nats-py's read loop;
the process stays connected but deaf. With nats-py's default ping interval (120 s) a node stayed deaf
for ~6 minutes (measured: no answer within 60 s); the bus now pings every `nats.ping_interval_s`, so
two unanswered pings mark the connection stale and it reconnects (measured: answers again after 15.0 s
at the default 5 s)."""

from __future__ import annotations

import socket
import time

import pytest

from protocols import NodePing
from tests.helpers import start_script, stop_process, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _answers(bus) -> bool:  # noqa: ANN001
    try:
        return bus.request(bus.subjects.node_ping, NodePing(), timeout_s=1) is not None
    except Exception:
        return False


def test_a_node_whose_read_loop_a_raw_message_killed_answers_again_within_seconds(nats_server, bus, tmp_path):
    node = start_script(
        "mgrpo-node",
        "--role",
        "tool",
        "--nats",
        nats_server.url,
        "--run-id",
        bus.run_id,
        "--name",
        "deaf",
        "--set",
        "tools.web_entities=100",
        "--set",
        "nats.ping_interval_s=1",
        stdout=open(tmp_path / "node.log", "w"),
    )
    try:
        wait_until(lambda: _answers(bus), timeout_s=60, what="the tool node never answered a ping")
        host, port = nats_server.url.removeprefix("nats://").split(":")
        with socket.create_connection((host, int(port))) as raw:
            raw.recv(4096)  # INFO
            # reply subject b"\xff"
            raw.sendall(f"CONNECT {{}}\r\nPUB {bus.subjects.node_ping} \xff 0\r\n\r\n".encode("latin-1"))
            time.sleep(0.5)
        hit = time.monotonic()
        wait_until(lambda: _answers(bus), timeout_s=30, what=lambda: (tmp_path / "node.log").read_text()[-2000:])
        assert time.monotonic() - hit < 30
    finally:
        stop_process(node)
