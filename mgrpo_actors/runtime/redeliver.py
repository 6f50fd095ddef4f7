"""`redeliver_unacked`: what a killed run's durable consumers held unacknowledged comes back at once when the run
resumes, instead of after the consumers' ack wait (60 s by default, `pipeline.ack_wait_s`).

JetStream keeps a delivered, unacknowledged message pending until its ack wait has passed since delivery, and only
then queues it for redelivery. A run killed mid-step leaves its in-flight work (a rollout request, a batch) pending
on consumers whose subscribers are gone, so the resumed run's first step used to wait out the whole ack wait. Here,
before any role starts, each such consumer's ack wait is shortened for a moment (nats-server re-checks pending
messages when a consumer's ack wait changes and queues the expired ones for redelivery) and then set back: the
resumed roles' first fetches get those messages first. Only for a resumed run whose every role is in this process
(`--role all --resume` on the embedded server), and only on durables nobody pulls from at that moment: a consumer
someone else is still serving (a node that joined the run and outlived it) would see its in-progress messages
delivered a second time.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import Any

from nats.js.api import AckPolicy, ConsumerInfo

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.bus import Bus

__all__ = ["EXPIRE_ACK_WAIT_S", "redeliver_unacked"]

log = get_logger(__name__)

EXPIRE_ACK_WAIT_S = 0.5  # the ack wait held for a moment: anything delivered before it is expired


def _holding(info: ConsumerInfo) -> bool:
    """A durable with explicit acks that holds delivered, unacknowledged messages and that nobody pulls from now
    (a pull request waiting there is a node of the run still alive: its messages are its own)."""
    config = info.config
    return (
        bool(config.durable_name)
        and config.ack_policy == AckPolicy.EXPLICIT
        and (info.num_ack_pending or 0) > 0
        and not info.num_waiting
    )


async def _set_ack_wait(js: Any, stream: str, info: ConsumerInfo, ack_wait_s: float) -> None:
    await js.add_consumer(stream, dataclasses.replace(info.config, ack_wait=ack_wait_s))


async def _redeliver(bus: Bus, streams: Iterable[str], ack_wait_s: float) -> int:
    js = bus._js
    found: list[tuple[str, ConsumerInfo]] = []
    for stream in streams:
        try:
            found += [(stream, info) for info in await js.consumers_info(stream)]
        except Exception as exc:  # a stream the run has not created (a role this run never had)
            log.debug("no consumers read", stream=stream, error=str(exc)[:200])
    for stream, info in found:  # a run killed while its ack wait was shortened (here, last time): the configured one
        if info.config.durable_name and (info.config.ack_wait or ack_wait_s) <= EXPIRE_ACK_WAIT_S:
            await _set_ack_wait(js, stream, info, ack_wait_s)
            info.config.ack_wait = ack_wait_s
    shortened: list[tuple[str, ConsumerInfo]] = []
    try:
        for stream, info in found:
            if _holding(info):
                shortened.append((stream, info))
                await _set_ack_wait(js, stream, info, EXPIRE_ACK_WAIT_S)
        if shortened:
            await asyncio.sleep(2 * EXPIRE_ACK_WAIT_S)  # the server's pending check runs within the shortened wait
    finally:  # every shortened one gets its ack wait back, whatever failed meanwhile
        for stream, info in shortened:
            await asyncio.shield(_set_ack_wait(js, stream, info, info.config.ack_wait or ack_wait_s))
            log.info(
                "unacknowledged messages of the killed run redelivered now, not after the ack wait",
                stream=stream,
                consumer=info.config.durable_name,
                messages=info.num_ack_pending,
                ack_wait_s=info.config.ack_wait or ack_wait_s,
            )
    return sum(info.num_ack_pending for _, info in shortened)


def redeliver_unacked(bus: Bus, streams: Iterable[str], ack_wait_s: float) -> int:
    """Queue for redelivery, now, every message the durables of `streams` hold delivered but unacknowledged;
    returns how many. `ack_wait_s`: what a consumer gets back if its recorded ack wait is the shortened one."""
    try:
        return bus.call(_redeliver(bus, list(streams), ack_wait_s), timeout=60.0)
    except Exception as exc:  # e.g. a user without consumer rights: the messages come back after the ack wait
        log.warning("unacknowledged messages not redelivered early", error=f"{type(exc).__name__}: {exc}"[:300])
        return 0
