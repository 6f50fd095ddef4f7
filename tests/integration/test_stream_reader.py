"""Reading a stream without a consumer (runtime/stream_reader.py) on a real nats-server: every message
in order across batches, a subject filter, following new messages live, messages larger than a
batch's byte budget, a stream made without direct gets (read one by one), and the server keeping no
consumer for any of it."""

from __future__ import annotations

import asyncio

import nats
import pytest

from mgrpo_actors.runtime import EmbeddedNats, StoredMessage, follow_stream, stream_reader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server():
    srv = EmbeddedNats(max_payload=16 * 1024 * 1024).start()
    yield srv
    srv.stop()


async def _read(
    url: str,
    stream: str,
    subject: str | None,
    wanted: int,
    publish_live: list[tuple[str, bytes]] = (),
    from_start: bool = True,
) -> list[StoredMessage]:
    nc = await nats.connect(url)
    got: list[StoredMessage] = []
    enough = asyncio.Event()

    async def on_msg(msg: StoredMessage) -> None:
        got.append(msg)
        if len(got) >= wanted:
            enough.set()

    follower = await follow_stream(nc, stream, subject, on_msg, from_start=from_start, poll_s=0.05)
    try:
        for subj, data in publish_live:
            await nc.jetstream().publish(subj, data)
        await asyncio.wait_for(enough.wait(), 30)
        await asyncio.sleep(0.2)  # nothing more than wanted comes
        info = await nc.jetstream().stream_info(stream)
        assert info.state.consumer_count == 0  # read without any consumer
    finally:
        await follower.unsubscribe()
        await nc.close()
    return got


async def _fill(url: str, stream: str, n: int, allow_direct: bool = True, size: int = 100) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream}.>"], allow_direct=allow_direct)
    for i in range(n):
        await js.publish(f"{stream}.{'odd' if i % 2 else 'even'}", i.to_bytes(4, "big") + b"x" * size)
    await nc.close()


def test_every_message_in_order_across_batches_then_new_ones_live(server):
    """1,200 stored messages (three batches) in stream order with their subjects and sequences, then 3 published
    after the reader started."""
    asyncio.run(_fill(server.url, "s1", 1200))
    live = [("s1.even", b"live-1"), ("s1.odd", b"live-2"), ("s1.even", b"live-3")]
    got = asyncio.run(_read(server.url, "s1", None, 1203, live))
    assert [m.seq for m in got] == list(range(1, 1204))
    assert [int.from_bytes(m.data[:4], "big") for m in got[:1200]] == list(range(1200))
    assert [m.data for m in got[1200:]] == [b"live-1", b"live-2", b"live-3"]
    assert got[0].subject == "s1.even" and got[1].subject == "s1.odd"
    # messages after it (the live ones may have come meanwhile)
    assert 1199 <= got[0].pending <= 1202 and got[1199].pending >= 0


def test_a_subject_filter_and_from_now_on(server):
    """Only the filtered subject's messages; with from_start=False only those published afterwards."""
    asyncio.run(_fill(server.url, "s2", 10))
    odd = asyncio.run(_read(server.url, "s2", "s2.odd", 5))
    assert [int.from_bytes(m.data[:4], "big") for m in odd] == [1, 3, 5, 7, 9] and {m.subject for m in odd} == {
        "s2.odd"
    }
    new = asyncio.run(_read(server.url, "s2", None, 1, [("s2.even", b"new")], from_start=False))
    assert [m.data for m in new] == [b"new"]


def test_messages_larger_than_a_batchs_byte_budget_are_read(server, monkeypatch):
    """The server sends at least one message per batch however large: 3 messages of 1 MiB with a 64 KiB budget."""
    monkeypatch.setattr(stream_reader, "BATCH_BYTES", 64 * 1024)
    asyncio.run(_fill(server.url, "s3", 3, size=1024 * 1024))
    got = asyncio.run(_read(server.url, "s3", None, 3))
    assert [int.from_bytes(m.data[:4], "big") for m in got] == [0, 1, 2] and all(
        len(m.data) == 4 + 1024 * 1024 for m in got
    )


def test_a_stream_without_direct_gets_is_read_one_message_at_a_time(server):
    """A stream made before runs had allow_direct: the same messages, through the stream's message get."""
    asyncio.run(_fill(server.url, "s4", 30, allow_direct=False))
    got = asyncio.run(_read(server.url, "s4", None, 31, [("s4.odd", b"live")]))
    assert [m.seq for m in got] == list(range(1, 32)) and got[-1].data == b"live"


def test_a_deleted_and_recreated_stream_is_followed_again_from_its_start(server, monkeypatch):
    """Deleted: the reads fail (logged, retried); recreated (sequences from 1 again): its new messages
    come; a callback that raises loses only that message."""
    monkeypatch.setattr(stream_reader, "RESET_CHECK_EVERY", 2)
    monkeypatch.setattr(stream_reader, "RETRY_S", 0.05)
    asyncio.run(_fill(server.url, "s5", 5))

    async def scenario() -> list[bytes]:
        nc = await nats.connect(server.url)
        got: list[bytes] = []

        async def on_msg(msg: StoredMessage) -> None:
            if msg.data == b"bad":
                raise ValueError("cannot take this one")
            got.append(msg.data)

        follower = await follow_stream(nc, "s5", None, on_msg, poll_s=0.05)
        try:
            for _ in range(100):
                if len(got) == 5:
                    break
                await asyncio.sleep(0.05)
            js = nc.jetstream()
            await js.delete_stream("s5")
            await asyncio.sleep(0.5)  # reads fail meanwhile
            await js.add_stream(name="s5", subjects=["s5.>"], allow_direct=True)
            for data in (b"new-1", b"bad", b"new-2"):
                await js.publish("s5.even", data)
            for _ in range(100):
                if len(got) == 7:
                    break
                await asyncio.sleep(0.05)
            assert follower._task is not None and not follower._task.done()
        finally:
            await follower.unsubscribe()
            await nc.close()
        return got

    got = asyncio.run(scenario())
    assert [int.from_bytes(d[:4], "big") for d in got[:5]] == [0, 1, 2, 3, 4] and got[5:] == [b"new-1", b"new-2"]
