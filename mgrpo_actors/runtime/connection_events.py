"""What a Bus does when nats-py reports on its connection: a disconnect and a reconnect (streams a
restarted server lost are made again), an error (slow consumers counted, refused JetStream calls
remembered, the first telling cause of a failing connect kept), and the connection closed for good."""

from __future__ import annotations

from typing import Any

import nats.errors

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.security import names_cause

__all__ = ["ConnectionEvents"]

log = get_logger("mgrpo_actors.runtime.bus")


class ConnectionEvents:
    """nats-py's connection callbacks for one Bus (they run on its bus thread)."""

    def __init__(self, bus: Any) -> None:  # the Bus (bus.py imports this module)
        self.bus = bus

    def callbacks(self) -> dict[str, Any]:
        """The keyword arguments of `nats.connect` that route its reports here."""
        return {
            "disconnected_cb": self.disconnected,
            "reconnected_cb": self.reconnected,
            "error_cb": self.error,
            "closed_cb": self.closed,
        }

    async def disconnected(self) -> None:
        if not self.bus._closing:
            log.warning("nats disconnected", url=self.bus.url)

    async def reconnected(self) -> None:
        bus = self.bus
        bus.reconnects += 1
        log.info("nats reconnected", url=bus.url, reconnects=bus.reconnects)
        # a restarted server may have lost its store (after the reconnect, not in it)
        bus.loop.submit(bus._recreate_streams("reconnected"))

    async def error(self, exc: Exception) -> None:
        bus = self.bus
        if isinstance(exc, nats.errors.SlowConsumerError):
            return await bus.slow_consumers.record(exc)
        bus._api_denials.record(exc)
        if bus._nc is None and not (bus._connect_error and names_cause(bus._connect_error)):
            bus._connect_error = exc  # while connecting: the first telling cause, said if the connect times out
        log.warning("nats error", url=bus.url, error=str(exc))

    async def closed(self) -> None:
        bus = self.bus
        if not bus._closing:
            log.error(
                "nats connection lost for good: reconnect attempts used up",
                url=bus.url,
                attempts=bus._max_reconnect_attempts,
            )
            if bus.on_connection_lost is not None:
                bus.on_connection_lost()
