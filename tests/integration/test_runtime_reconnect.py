"""The bus survives a nats-server restart: it reconnects and its actors' subscriptions come back."""

from __future__ import annotations

import pytest

from mgrpo_actors.runtime import Bus, BusActor, BusError, EmbeddedNats
from protocols import NodeInfo, NodePing
from tests.helpers import wait_until

pytestmark = pytest.mark.integration


class Pong(BusActor):
    def on_start(self) -> None:
        super().on_start()
        self.listen(self.bus.subjects.node_ping)

    def handlers(self) -> dict:
        return {NodePing: lambda ping, d: NodeInfo(node="pong", roles=[], versions={}, uptime_s=0.0, pid=0, host="")}


def test_bus_reconnects_after_server_restart_and_actor_serves_again(tmp_path):
    server = EmbeddedNats(store_dir=str(tmp_path / "store")).start()
    port = server.port
    bus = Bus(server.url, run_id="reconnect", node="rc", reconnect_wait_s=0.2, max_reconnect_attempts=100).connect()
    actor = Pong.start_ready(bus)
    try:
        assert bus.request(bus.subjects.node_ping, NodePing()).node == "pong"
        server.kill()
        wait_until(lambda: not bus.connected, 10, what="bus noticed the server is gone")
        server = EmbeddedNats(port=port, store_dir=str(tmp_path / "store")).start()
        wait_until(lambda: bus.reconnects >= 1 and bus.connected, 20, what="bus reconnected")

        def answered() -> bool:
            try:
                return bus.request(bus.subjects.node_ping, NodePing(), timeout_s=1).node == "pong"
            except BusError:
                return False

        assert wait_until(answered, 10, what="the actor's subscription was restored")
    finally:
        actor.stop()
        bus.close()
        server.stop()
