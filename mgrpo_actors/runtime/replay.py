"""Reading a stream without taking anything from anyone and without a consumer (runtime/stream_reader.py
says why): from the stream's first message or from now on, then following it live. What the monitor
uses; work consumers use runtime/consumer.py's durable ones instead."""

from __future__ import annotations

import asyncio

from mgrpo_actors.runtime.bus import Bus, Subscription
from mgrpo_actors.runtime.delivery import Delivery
from mgrpo_actors.runtime.stream_reader import StoredMessage, follow_stream
from mgrpo_actors.runtime.targets import Target, tell

__all__ = ["replay_stream", "stored_messages"]


def replay_stream(
    bus: Bus, stream: str, target: Target, subject: str | None = None, from_start: bool = True
) -> Subscription:
    """Tell `target` a Delivery (no reply, nothing to settle) for every message of `stream`, replayed
    from its start, then live. `stop()` on the result ends it; the bus's drain ends it too."""

    async def on_msg(msg: StoredMessage) -> None:
        if bus.audit is not None:
            bus.audit.record(msg.subject, msg.data, "stream")
        tell(target, Delivery(msg.subject, msg.data))

    return Subscription(
        bus.loop, subject or stream, "", bus.call(follow_stream(bus._nc, stream, subject, on_msg, from_start))
    )


def stored_messages(bus: Bus, stream: str, timeout_s: float = 60.0) -> list[StoredMessage]:
    """Every message `stream` holds now, in stream order (what a resumed `mgrpo run` reads back of the run
    before it goes on: its summary then covers the whole run). Direct gets, no consumer; TimeoutError if the
    stream is not read to its end within `timeout_s`."""

    async def read() -> list[StoredMessage]:
        info = await bus._js.stream_info(stream)
        last, found, done = info.state.last_seq, [], asyncio.Event()
        if info.state.messages == 0:
            return found

        async def on_msg(msg: StoredMessage) -> None:
            found.append(msg)
            if msg.seq >= last:
                done.set()

        follower = await follow_stream(bus._nc, stream, None, on_msg)
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        finally:
            await follower.unsubscribe()
        return [msg for msg in found if msg.seq <= last]

    return bus.call(read(), timeout=timeout_s + 10)
