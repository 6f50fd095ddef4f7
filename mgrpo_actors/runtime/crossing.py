"""Publishing a message that crosses NATS accounts again, with the same de-duplication id.

A message that crosses accounts (deploy/accounts.py: the reward statistics and the step events) is
published into the publisher's own account, whose stream acknowledges it, and reaches the importing
account's stream as a plain NATS message: if that stream cannot take it at that moment (no leader
while a cluster elects one), the importing side never gets it and the run waits. So the publishers of
those messages send each one again a few times over the next minute, with the same `Nats-Msg-Id`:
every stream that already has it acknowledges it as a duplicate and keeps one copy, and one that
missed it gets it then. Only resends within the streams' duplicate window are made (beyond it a
resend would be stored twice). Without accounts the resends are duplicates everywhere: harmless.
"""

from __future__ import annotations

from typing import Any

from mgrpo_actors.log import get_logger
from protocols import Message

__all__ = ["RESEND_AFTER_S", "publish_crossing", "resend_later"]

log = get_logger(__name__)

# After the first publish: covers a leader election of a few seconds and a slow one of up to a minute.
RESEND_AFTER_S = (2.0, 5.0, 15.0, 45.0)


def resend_later(
    bus: Any, subject: str, message: Message | bytes, msg_id: str, after_s: tuple[float, ...] = RESEND_AFTER_S
) -> int:
    """Publish `message` on `subject` again with `msg_id` after each of `after_s` seconds (counted from
    now; fire and forget, on the bus's loop); returns how many resends were scheduled."""
    data = bus._encode(message)
    window = bus._streams[1].duplicate_window_s
    delays = [delay for delay in after_s if delay < 0.9 * window]
    loop = bus.loop.loop

    async def send() -> None:
        try:
            await bus._js.publish(subject, data, timeout=5.0, headers={"Nats-Msg-Id": msg_id})
        except Exception as exc:  # disconnected, or no stream here right now: a later resend may get through
            log.debug("resend failed", subject=subject, msg_id=msg_id, error=f"{type(exc).__name__}: {exc}")

    def schedule() -> None:  # timer handles, not tasks: a bus that stops meanwhile just drops them
        for delay in delays:
            loop.call_later(delay, lambda: loop.create_task(send()))

    bus.loop.call_soon(schedule)
    return len(delays)


def publish_crossing(bus: Any, subject: str, message: Message, msg_id: str, crosses: bool = True) -> int:
    """`bus.js_publish` with `msg_id`, then (if the message `crosses` accounts) its resends; returns the
    stream sequence. Nothing is scheduled when the publish itself fails: the caller publishes again."""
    seq = bus.js_publish(subject, message, msg_id=msg_id)
    if crosses:
        resend_later(bus, subject, message, msg_id)
    return seq
