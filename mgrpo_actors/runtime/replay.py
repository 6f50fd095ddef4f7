"""Reading a stream without taking anything from anyone: an ordered consumer (ephemeral, in memory,
no acks, deleted by the server once nobody listens), from the stream's first message or from now on,
then following it live. What `mgrpo tap --stream` and the monitor use; work consumers use
runtime/consumer.py's durable ones instead."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from nats.js import api as js_api

from mgrpo_actors.runtime.bus import Bus, Subscription
from mgrpo_actors.runtime.delivery import Delivery
from mgrpo_actors.runtime.targets import Target, tell

__all__ = ["replay_stream", "subscribe_ordered"]

# The server deletes the ephemeral consumer this long after its subscriber went away.
_INACTIVE_THRESHOLD_S = 30.0


async def subscribe_ordered(js: Any, stream: str, subject: str | None, cb: Callable[[Any], Awaitable[None]], from_start: bool = True) -> Any:
    """Push `stream`'s messages (those on `subject`, default all) to `cb` in stream order, from the
    first stored one (`from_start`) or only new ones; returns nats-py's subscription."""
    policy = js_api.DeliverPolicy.ALL if from_start else js_api.DeliverPolicy.NEW
    config = js_api.ConsumerConfig(deliver_policy=policy, inactive_threshold=_INACTIVE_THRESHOLD_S)
    return await js.subscribe(subject or ">", stream=stream, cb=cb, ordered_consumer=True, config=config)


def replay_stream(bus: Bus, stream: str, target: Target, subject: str | None = None, from_start: bool = True) -> Subscription:
    """Tell `target` a Delivery (no reply, nothing to settle) for every message of `stream`, replayed
    from its start, then live. `stop()` on the result ends it; the bus's drain ends it too."""
    async def on_msg(msg: Any) -> None:
        if bus.audit is not None:
            bus.audit.record(msg.subject, msg.data, "stream")
        tell(target, Delivery(msg.subject, msg.data))

    async def _sub() -> Any:
        return await subscribe_ordered(bus._js, stream, subject, on_msg, from_start)

    return Subscription(bus.loop, subject or stream, "", bus.call(_sub()))
