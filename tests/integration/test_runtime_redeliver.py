"""A resumed run gets back what its killed consumers held unacknowledged at once, not after the ack wait
(runtime/redeliver.py), on a real nats-server: the messages come back to the next fetch within a few seconds of a
60 s ack wait, and the consumer keeps its ack wait."""

from __future__ import annotations

import time

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from mgrpo_actors.runtime.redeliver import EXPIRE_ACK_WAIT_S, redeliver_unacked

pytestmark = pytest.mark.integration

ACK_WAIT_S = 60.0


async def _killed_consumer(
    url: str, stream: str, subject: str, durable: str, ack_wait_s: float, settle: bool = False
) -> None:
    """Three messages; a consumer that took two and died without settling them (its connection closed), or
    with `settle` acknowledged them."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[subject])
    for i in range(3):
        await js.publish(subject, f"m{i}".encode())
    config = ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait_s, max_deliver=-1)
    await js.add_consumer(stream, config)
    taken = await (await js.pull_subscribe(subject, durable=durable, stream=stream)).fetch(2, timeout=5)
    assert [m.data for m in taken] == [b"m0", b"m1"]
    for message in taken if settle else ():
        await message.ack_sync()
    await nc.close()


async def _fetch_all(url: str, stream: str, subject: str, durable: str) -> tuple[list[tuple[bytes, int]], float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        messages = await (await js.pull_subscribe(subject, durable=durable, stream=stream)).fetch(3, timeout=3)
        for message in messages:
            await message.ack()
        info = await js.consumer_info(stream, durable)
        return [(m.data, m.metadata.num_delivered) for m in messages], info.config.ack_wait
    finally:
        await nc.close()


def test_what_a_killed_consumer_held_comes_back_at_once_and_the_ack_wait_is_kept(bus, nats_server):
    stream, subject, durable = f"jobs-{bus.run_id}", f"{bus.subjects.root}.jobs", "worker"
    bus.call(_killed_consumer(nats_server.url, stream, subject, durable, ACK_WAIT_S))

    started = time.monotonic()
    assert redeliver_unacked(bus, [stream, f"absent-{bus.run_id}"], ACK_WAIT_S) == 2
    got, ack_wait = bus.call(_fetch_all(nats_server.url, stream, subject, durable))
    elapsed = time.monotonic() - started

    assert sorted(got) == [(b"m0", 2), (b"m1", 2), (b"m2", 1)]  # the two held ones again, the third for the first time
    assert elapsed < ACK_WAIT_S / 4  # not the ack wait (the margin is for a loaded machine, not a timing claim)
    assert ack_wait == pytest.approx(ACK_WAIT_S)


def test_a_consumer_left_with_the_shortened_ack_wait_gets_the_configured_one_back(bus, nats_server):
    stream, subject, durable = f"left-{bus.run_id}", f"{bus.subjects.root}.left", "worker"
    bus.call(_killed_consumer(nats_server.url, stream, subject, durable, EXPIRE_ACK_WAIT_S))

    assert redeliver_unacked(bus, [stream], ACK_WAIT_S) == 2
    _, ack_wait = bus.call(_fetch_all(nats_server.url, stream, subject, durable))
    assert ack_wait == pytest.approx(ACK_WAIT_S)


def test_consumers_holding_nothing_are_left_as_they_are(bus, nats_server):
    stream, subject, durable = f"idle-{bus.run_id}", f"{bus.subjects.root}.idle", "worker"
    bus.call(_killed_consumer(nats_server.url, stream, subject, durable, 30.0, settle=True))

    assert redeliver_unacked(bus, [stream], ACK_WAIT_S) == 0
    got, ack_wait = bus.call(_fetch_all(nats_server.url, stream, subject, durable))
    assert got == [(b"m2", 1)]
    assert ack_wait == pytest.approx(30.0)


def test_a_durable_left_with_the_shortened_ack_wait_and_nothing_held_gets_the_configured_one_back(bus, nats_server):
    stream, subject, durable = f"settled-{bus.run_id}", f"{bus.subjects.root}.settled", "worker"
    bus.call(_killed_consumer(nats_server.url, stream, subject, durable, EXPIRE_ACK_WAIT_S, settle=True))

    assert redeliver_unacked(bus, [stream], ACK_WAIT_S) == 0
    _, ack_wait = bus.call(_fetch_all(nats_server.url, stream, subject, durable))
    assert ack_wait == pytest.approx(ACK_WAIT_S)
