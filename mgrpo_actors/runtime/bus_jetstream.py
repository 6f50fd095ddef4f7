"""The JetStream half of `Bus` (bus.py): the run's streams, publishing into them, durable pull
consumers feeding actors, KV buckets and object stores. Every call runs on the bus thread and waits
for it; streams a server lost are made again when a publish finds none."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import nats.js.errors

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.consumer import Consumer
from mgrpo_actors.runtime.errors import BusError
from mgrpo_actors.runtime.jetstream import (
    ApiDenials,
    StreamLimits,
    consumer_config,
    ensure_streams,
    jetstream_missing,
    no_jetstream_error,
    recreate_streams,
    with_api_retries,
)
from mgrpo_actors.runtime.kv import KvBucket, open_kv
from mgrpo_actors.runtime.objects import ObjectBucket, open_object_store
from mgrpo_actors.runtime.retention import ack_floor, purge_below
from mgrpo_actors.runtime.store_full import StoreWatch
from mgrpo_actors.runtime.targets import Target
from protocols import Message, Subjects
from protocols.durables import DurableSpec

if TYPE_CHECKING:
    from mgrpo_actors.runtime.audit import DeliveryLog
    from mgrpo_actors.runtime.loop import BusLoop

__all__ = ["JetStreamCalls"]

log = get_logger("mgrpo_actors.runtime.bus")

MANY_IN_FLIGHT = 64  # js_publish_many's publishes awaiting their acks at once
_Encoded = tuple[int, str, bytes, "dict[str, str] | None"]  # (item index, subject, data, headers)


class JetStreamCalls:
    """Bus's JetStream methods; Bus sets these attributes and provides call/_after_outbox/_encode."""

    url: str
    run_id: str
    subjects: Subjects
    durables: dict[str, DurableSpec]
    work_durables: tuple[str, ...]
    max_bytes: int
    loop: BusLoop
    audit: DeliveryLog | None
    _js: Any
    _streams: tuple[list[str], StreamLimits]
    _consumers: list[Consumer]
    _api_denials: ApiDenials
    store_watch: StoreWatch  # a write that finds the server's store full stops the run (runtime/store_full.py)
    _purge_failed: set[str]  # streams whose purge failed already (said once)
    _purge_refused: set[str]  # streams this node's user may not purge (not tried again)
    call: Any
    _after_outbox: Any
    _encode: Any

    def ensure_streams(self, which: list[str] | None = None, limits: StreamLimits | None = None) -> list[str]:
        """Create the run's streams `which` names ("rollouts", "traj-main", …; default all of
        protocols.Subjects.streams) that are missing; returns their names. The bus remembers them and
        creates them again when the server lost them (after a reconnect, or when a publish finds no stream).

        Raises BusError saying so when the server has no JetStream.
        """
        which = which if which is not None else self.subjects.stream_names()
        self._streams = (sorted({*self._streams[0], *which}), limits or self._streams[1])
        try:
            # API retries on a busy cluster
            return self.call(
                ensure_streams(self._js, self.subjects, which, self._streams[1], self.max_bytes, self._api_denials),
                timeout=300,
            )
        except Exception as exc:
            if jetstream_missing(exc):
                raise no_jetstream_error(self.url) from None
            raise

    async def _recreate_streams(self, why: str) -> None:
        """The streams this node ensured, created again where the server lost them (restarted with an empty store)."""
        await recreate_streams(self._js, self.subjects, *self._streams, self.max_bytes, why)

    def add_stream(self, name: str, subjects: list[str]) -> None:
        """Create one stream (used by tests and benchmarks for ad-hoc streams)."""
        self.call(self._js.add_stream(name=name, subjects=subjects, max_msg_size=self.max_bytes))

    def stream_info(self, name: str) -> Any:
        """The server's information on a stream (state.messages, state.bytes, config)."""
        return self.call(self._js.stream_info(name))

    def js_publish(
        self, subject: str, message: Message | bytes, timeout_s: float = 5.0, msg_id: str | None = None
    ) -> int:
        """Publish into a stream and wait for the server's ack; returns the stream sequence.

        msg_id: JetStream's de-duplication id; a second publish with the same id within the stream's
        duplicate window is acknowledged but not stored again (republishing after a crash is safe).
        StoreFull (a BusError) when the server's store has no room for it: the run is stopped (runtime/store_full.py).
        """
        data = self._encode(message)
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        with self.store_watch.writing(f"a publish to {subject}", len(data)):
            try:
                ack = self.call(
                    self._after_outbox(self._js.publish(subject, data, timeout=timeout_s, headers=headers)),
                    timeout=timeout_s + 1,
                )
            except nats.js.errors.NoStreamResponseError:
                if not self._streams[0]:
                    raise
                log.warning("no stream takes this subject: recreating the node's streams", subject=subject)
                self.call(self._recreate_streams("a publish found no stream"))
                ack = self.call(
                    self._after_outbox(self._js.publish(subject, data, timeout=timeout_s, headers=headers)),
                    timeout=timeout_s + 1,
                )
        return ack.seq

    def js_publish_many(
        self, items: Sequence[tuple[str, Message | bytes, str | None]], timeout_s: float = 5.0
    ) -> list[int | Exception]:
        """Publish (subject, message, msg_id) items into streams together and wait for the server's acks: per item
        its stream sequence, or the exception that item met (as `js_publish` raises it; StoreFull stops the run).
        One round trip for the lot instead of one each: a batch's trajectories were published one after another, a
        few milliseconds of every step each (docs/benchmarks.md §`steps`: where a step's time goes). At most
        MANY_IN_FLIGHT await their acks at once, each for `timeout_s` from when it went out. They go out in order on
        this connection, so a stream stores them in that order (items published again after their stream was
        recreated come after the others). Raises (BusError, TimeoutError) only when the bus itself fails on the first
        round: then none is known stored."""
        results: list[int | Exception] = []
        encoded: list[_Encoded] = []
        for index, (subject, message, msg_id) in enumerate(items):
            results.append(0)
            try:
                encoded.append((index, subject, self._encode(message), {"Nats-Msg-Id": msg_id} if msg_id else None))
            except Exception as exc:  # this item's failure, not the others'
                results[index] = exc
        if not encoded:
            return results
        acks = self._publish_together(encoded, timeout_s)
        lost = [i for i, ack in enumerate(acks) if isinstance(ack, nats.js.errors.NoStreamResponseError)]
        if lost and self._streams[0]:  # as js_publish does, each wait with its own time limit
            log.warning("no stream takes these subjects: recreating the node's streams", items=len(lost))
            try:
                self.call(self._recreate_streams("a publish found no stream"))
                again = self._publish_together([encoded[i] for i in lost], timeout_s)
            except Exception as exc:  # the lost items' failure: the others are stored
                again = [exc] * len(lost)
            for i, ack in zip(lost, again, strict=True):
                acks[i] = ack
        for (index, subject, data, _), ack in zip(encoded, acks, strict=True):
            results[index] = ack.seq if not isinstance(ack, BaseException) else self._store_error(ack, subject, data)
        return results

    def _publish_together(self, encoded: list[_Encoded], timeout_s: float) -> list[Any]:
        """The acks (or exceptions) of publishing `encoded` concurrently, at most MANY_IN_FLIGHT at a time."""

        async def publish_all() -> list[Any]:
            room = asyncio.Semaphore(MANY_IN_FLIGHT)

            async def publish(subject: str, data: bytes, headers: dict[str, str] | None) -> Any:
                async with room:
                    return await self._js.publish(subject, data, timeout=timeout_s, headers=headers)

            tasks = [publish(s, d, h) for _, s, d, h in encoded]
            return list(await asyncio.gather(*tasks, return_exceptions=True))

        waves = -(-len(encoded) // MANY_IN_FLIGHT)
        return self.call(self._after_outbox(publish_all()), timeout=waves * timeout_s + 2)

    def _store_error(self, exc: BaseException, subject: str, data: bytes) -> Exception:
        """A publish's failure as js_publish would raise it: StoreFull when the store is full (the run stops)."""
        if not isinstance(exc, Exception):  # cancelled (the bus stopping meanwhile)
            return BusError(f"a publish to {subject} did not finish: {type(exc).__name__}")
        try:
            with self.store_watch.writing(f"a publish to {subject}", len(data)):
                raise exc
        except Exception as raised:
            return raised
        raise AssertionError("unreachable")  # writing() re-raises what it was given or StoreFull

    def consume(
        self,
        stream: str,
        durable: str,
        target: Target,
        subject: str | None = None,
        batch: int = 16,
        ack_wait_s: float = 60.0,
        max_ack_pending: int = 256,
        max_deliver: int = -1,
    ) -> Consumer:
        """Feed `target` from a durable pull consumer (created if missing, resumed if present).

        At most `batch` deliveries are unsettled at a time (backpressure); unsettled ones are kept
        alive with progress acks every ack_wait_s / 3. `max_deliver` -1 (default) never drops a
        message that keeps coming back: nothing accepted is lost silently.
        """
        consumer = Consumer(
            self.loop, stream, durable, subject or "", target, batch, audit=self.audit, progress_every_s=ack_wait_s / 3
        )
        config = consumer_config(durable, ack_wait_s, max_ack_pending, max_deliver)

        async def durable_gone() -> bool:
            try:
                await self._js.consumer_info(stream, durable)
                return False
            except nats.js.errors.NotFoundError:  # the consumer, or its stream
                return True

        consumer.durable_gone, consumer.on_durable_gone = durable_gone, self._durable_gone

        async def _start() -> Any:
            psub = await with_api_retries(
                lambda: self._js.pull_subscribe(subject or ">", durable=durable, stream=stream, config=config),
                f"consumer {durable}",
                self._api_denials,
            )
            await consumer.follow_server_ack_wait(psub, ack_wait_s)
            return self.loop.loop.create_task(consumer.run(psub))

        consumer._task = self.call(_start(), timeout=120)
        self._consumers.append(consumer)
        return consumer

    def _durable_gone(self, why: str) -> None:
        """A consumer's durable was deleted under it: the run stops (its node exits 3) rather than hang."""
        self.stop_run(
            f"{why}: this node's role would receive nothing more; "
            "restarting the node (mgrpo run --resume) makes it again"
        )

    def _work_stream(self, durable: str) -> str:
        if durable not in self.work_durables:
            raise ValueError(f"{durable!r} is not the one reader of its stream: nothing of it may be purged")
        return self.subjects.stream(self.durables[durable].stream)

    def _consumed_work_failed(self, stream: str, exc: BaseException) -> None:
        # Said once per stream. Refused (a deployment rendered before its users could purge): never tried again,
        # since each refusal costs the API's timeout on the step's path; else tried again after the next step.
        refused = isinstance(exc, BusError)
        say = log.debug if stream in self._purge_failed else log.warning
        self._purge_failed.add(stream)
        if refused:
            self._purge_refused.add(stream)
        say(
            "consumed work not removed from its stream"
            + (": this node's user may not purge it (not tried again)" if refused else " (tried again after a step)"),
            stream=stream,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )

    def ack_floor(self, durable: str) -> int | None:
        """How far `durable` (a work durable: protocols.durables.work_durables) has acknowledged every message of its
        stream (runtime/retention.py); None, said once, when the server cannot tell now."""
        stream = self._work_stream(durable)
        if stream in self._purge_refused:
            return None
        try:
            return self.call(
                with_api_retries(
                    lambda: ack_floor(self._js, stream, durable), f"{durable}'s ack floor", self._api_denials
                ),
                timeout=60,
            )
        except Exception as exc:
            self._consumed_work_failed(stream, exc)
            return None

    def purge_below(self, durable: str, seq: int) -> int:
        """Remove the messages below `seq` from the stream `durable` alone reads (below its ack floor: acknowledged
        work, runtime/retention.py); returns how many went. A failure is said once, not raised: a stream keeping
        more for a while is no reason to stop a step."""
        stream = self._work_stream(durable)
        if stream in self._purge_refused or seq < 1:  # nats.py would send seq 0 as no seq: purge everything
            return 0
        try:
            return self.call(
                with_api_retries(lambda: purge_below(self._js, stream, seq), f"purging {stream}", self._api_denials),
                timeout=60,
            )
        except Exception as exc:
            self._consumed_work_failed(stream, exc)
            return 0

    def kv(self, bucket: str, history: int = 1) -> KvBucket:
        """Open a KV bucket, creating it if missing (with the replicas of the node's streams)."""
        return KvBucket(
            self.loop,
            bucket,
            self.call(open_kv(self._js, bucket, history, self._streams[1].replicas, self._api_denials), timeout=120),
            self.max_bytes,
            self.store_watch,
            self._api_denials,
        )

    def object_store(self, bucket: str) -> ObjectBucket:
        """Open an object store bucket, creating it if missing."""
        return ObjectBucket(
            self.loop,
            bucket,
            self.call(open_object_store(self._js, bucket, self._streams[1].replicas, self._api_denials), timeout=120),
            store_watch=self.store_watch,
        )
