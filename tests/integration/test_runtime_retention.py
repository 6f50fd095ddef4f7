"""Consumed work leaves its stream (runtime/retention.py ConsumedWork, Bus.ack_floor / purge_below) on a real
nats-server: what the stream's one durable acknowledged goes `keep_steps` steps later, an unacknowledged message
is never removed (nor anything after it), keep -1 removes nothing, only a stream's one reader may purge it, and a
purge that cannot run is said, not raised."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from mgrpo_actors.runtime.retention import ConsumedWork

pytestmark = pytest.mark.integration


class _Reader:
    """The durable `main-aligner` on traj-main, read through its own connection (as the aligner does)."""

    def __init__(self, url: str, stream: str, subject: str, **login: str) -> None:
        self.url, self.stream, self.subject, self.login = url, stream, subject, login
        asyncio.run(self._run(create=True))

    async def _run(self, create: bool = False, ack: set[int] = frozenset()) -> None:
        nc = await nats.connect(self.url, **self.login)
        js = nc.jetstream()
        if create:
            config = ConsumerConfig(durable_name="main-aligner", ack_policy=AckPolicy.EXPLICIT, ack_wait=60)
            await js.add_consumer(self.stream, config)
        else:
            psub = await js.pull_subscribe(self.subject, durable="main-aligner", stream=self.stream)
            for message in await psub.fetch(max(ack), timeout=5):  # 1..max(ack): others are nakked
                if message.metadata.sequence.stream in ack:
                    await message.ack_sync()
                else:
                    await message.nak()
        await nc.close()

    def ack(self, *seqs: int) -> None:
        asyncio.run(self._run(ack=set(seqs)))


def _stream(bus, nats_server, messages: int = 10, **login: str) -> tuple[str, _Reader]:
    bus.ensure_streams(["traj-main"])
    subject = bus.subjects.trajectories("main")
    for i in range(messages):
        bus.js_publish(subject, f"t{i}".encode())
    stream = bus.subjects.stream("traj-main")
    return stream, _Reader(nats_server.url, stream, subject, **login)


def _sequences(bus, stream: str) -> list[int]:
    state = bus.stream_info(stream).state
    return list(range(state.first_seq, state.last_seq + 1)) if state.messages else []


def test_acknowledged_work_goes_keep_steps_steps_later(bus, nats_server):
    stream, reader = _stream(bus, nats_server)
    consumed = ConsumedWork(bus, "main-aligner", keep_steps=1)
    reader.ack(1, 2, 3)
    assert consumed.after_step() == 0  # step 1: its floor (3) noted, kept for one step
    reader.ack(4, 5, 6)
    assert consumed.after_step() == 3  # step 2: what step 1 had acknowledged goes
    assert _sequences(bus, stream) == list(range(4, 11))
    assert consumed.after_step() == 3  # step 3, nothing new acknowledged: step 2's 4..6 go
    assert _sequences(bus, stream) == list(range(7, 11))  # 7..10 were never acknowledged
    assert consumed.after_step() == 0


def test_keep_zero_removes_what_is_acknowledged_but_never_past_an_unacknowledged_message(bus, nats_server):
    stream, reader = _stream(bus, nats_server)
    consumed = ConsumedWork(bus, "main-aligner", keep_steps=0)
    reader.ack(1, 2, 4, 5, 6)  # 3 is not
    assert consumed.after_step() == 2
    assert _sequences(bus, stream) == list(range(3, 11))


def test_keep_minus_one_keeps_everything_and_only_a_streams_one_reader_may_purge(bus, nats_server):
    stream, reader = _stream(bus, nats_server)
    reader.ack(*range(1, 11))
    consumed = ConsumedWork(bus, "main-aligner", keep_steps=-1)
    assert [consumed.after_step() for _ in range(3)] == [0, 0, 0]
    assert len(_sequences(bus, stream)) == 10
    with pytest.raises(ValueError, match="not the one reader of its stream"):
        bus.purge_below("main-aligner-plans", 5)  # the steps stream: three readers


def test_a_purge_that_cannot_run_is_said_and_not_raised(bus):
    # no stream, no durable: the step goes on, the next one tries again
    consumed = ConsumedWork(bus, "main-learner", keep_steps=0)
    assert consumed.after_step() == 0 and bus.ack_floor("main-learner") is None
    assert bus.purge_below("main-learner", 5) == 0


def test_a_user_who_may_not_purge_is_refused_once_and_never_asked_again(tmp_path):
    """A deployment rendered before its users could purge their work streams: the first refusal is said and costs
    the API's timeout once; after it the stream is left as it is, with no more waits on the steps' path."""
    import time

    from mgrpo_actors.runtime import Bus, EmbeddedNats
    from mgrpo_actors.runtime.security import ConnectSecurity

    users = (
        "authorization { users: [ { user: u, password: p, permissions: { "
        'publish: { allow: [">"], deny: ["$JS.API.STREAM.PURGE.>"] }, subscribe: ">" } } ] }\n'
    )
    with EmbeddedNats(extra_config=users) as server:
        bus = Bus(server.url, run_id="refused", node="t", security=ConnectSecurity(user="u", password="p")).connect()
        try:
            stream, reader = _stream(bus, server, user="u", password="p")
            reader.ack(1, 2, 3)
            consumed = ConsumedWork(bus, "main-aligner", keep_steps=0)
            assert consumed.after_step() == 0  # refused: said, not raised
            started = time.monotonic()
            assert [consumed.after_step() for _ in range(3)] == [0, 0, 0]
            assert time.monotonic() - started < 1.0  # not asked again
            assert len(_sequences(bus, stream)) == 10
        finally:
            bus.close()
