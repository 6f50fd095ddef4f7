"""`Subscription`: a core NATS subscription of the bus feeding an actor (or any target)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.loop import BusLoop

__all__ = ["Subscription"]

log = get_logger("mgrpo_actors.runtime.bus")


@dataclass
class Subscription:
    """A core NATS subscription feeding a target; `stop()` unsubscribes."""

    loop: BusLoop
    subject: str
    queue: str
    _sub: Any = None

    def stop(self) -> None:
        # Also while disconnected: nats-py then drops the subscription from what it restores on reconnect.
        if self._sub is not None and self.loop.running:
            try:
                self.loop.call(self._sub.unsubscribe(), timeout=5)
            except Exception as exc:
                log.warning("unsubscribe failed", subject=self.subject, error=str(exc))
        self._sub = None
