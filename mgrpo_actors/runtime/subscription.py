"""`Subscription`: a core NATS subscription of the bus feeding an actor (or any target), and
`mailbox_feeder`, its message callback.

A subscription keeps at most `limit` of its deliveries in its target's mailbox. Beyond that its
callback waits for the target to take one, so nats-py stops handing it messages and keeps them in the
subscription's own pending queue (it goes on reading the socket: the server never cuts the node off as
slow); only when that queue is full too does nats-py drop messages, and every drop is counted and
reported (slow_consumers.py). A flood therefore costs bounded memory, not an unbounded mailbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.delivery import REPLY_PREFIXES, Delivery
from mgrpo_actors.runtime.loop import BusLoop
from mgrpo_actors.runtime.targets import Target, tell
from protocols import Failure, encode

__all__ = ["Subscription", "mailbox_feeder"]

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


def mailbox_feeder(bus: Any, target: Target, limit: int) -> Callable[[Any], Awaitable[None]]:
    """The nats-py callback of one subscription of `bus`: audit, refuse non-inbox reply subjects, hand
    each message to `target` as a Delivery with at most `limit` of them in its mailbox at a time."""
    slots = asyncio.Semaphore(limit)

    async def on_msg(msg: Any) -> None:
        if bus.audit is not None:
            bus.audit.record(msg.subject, msg.data, "subscription")
        # replies go to inboxes only: refused, never answered
        if msg.reply and not msg.reply.startswith(REPLY_PREFIXES):
            return bus.dead_letter(
                Delivery(msg.subject, msg.data, "", msg.headers),
                f"reply subject {msg.reply[:200]!r} is not an inbox",
                "BadReplySubject",
            )
        await slots.acquire()
        delivery = Delivery(
            msg.subject, msg.data, msg.reply, msg.headers, on_taken=lambda: bus.loop.call_soon(slots.release)
        )
        if not tell(target, delivery):
            delivery.taken()
            if msg.reply:  # the actor is gone: tell the requester now rather than let it time out
                failure = Failure(
                    subject=msg.subject, reason="the actor serving this subject has stopped", error_type="ActorStopped"
                )
                await bus.publish_now(msg.reply, encode(failure))
        elif not hasattr(target, "tell"):
            delivery.taken()  # a callable target has handled it already

    return on_msg
