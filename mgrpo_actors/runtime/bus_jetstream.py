"""The JetStream half of `Bus` (bus.py): the run's streams, publishing into them, durable pull
consumers feeding actors, KV buckets and object stores. Every call runs on the bus thread and waits
for it; streams a server lost are made again when a publish finds none."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import nats.js.errors

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.consumer import Consumer
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
from mgrpo_actors.runtime.targets import Target
from protocols import Message, Subjects

if TYPE_CHECKING:
    from mgrpo_actors.runtime.audit import DeliveryLog
    from mgrpo_actors.runtime.loop import BusLoop

__all__ = ["JetStreamCalls"]

log = get_logger("mgrpo_actors.runtime.bus")


class JetStreamCalls:
    """Bus's JetStream methods; Bus sets these attributes and provides call/_after_outbox/_encode."""

    url: str
    run_id: str
    subjects: Subjects
    max_bytes: int
    loop: BusLoop
    audit: DeliveryLog | None
    _js: Any
    _streams: tuple[list[str], StreamLimits]
    _consumers: list[Consumer]
    _api_denials: ApiDenials
    call: Any
    _after_outbox: Any
    _encode: Any

    def ensure_streams(self, which: list[str] | None = None, limits: StreamLimits | None = None) -> list[str]:
        """Create the run's streams `which` names ("rollouts", "traj-main", …; default all of
        protocols.Subjects.streams) that are missing; returns their names. The bus remembers them and
        creates them again when the server lost them (after a reconnect, or when a publish finds no stream).

        Raises BusError saying so when the server has no JetStream.
        """
        which = (
            which
            if which is not None
            else [name.removeprefix(f"mgrpo-{self.run_id}-") for name in self.subjects.streams()]
        )
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
        """
        data = self._encode(message)
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
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

    def kv(self, bucket: str, history: int = 1) -> KvBucket:
        """Open a KV bucket, creating it if missing (with the replicas of the node's streams)."""
        return KvBucket(
            self.loop,
            bucket,
            self.call(open_kv(self._js, bucket, history, self._streams[1].replicas, self._api_denials), timeout=120),
            self.max_bytes,
        )

    def object_store(self, bucket: str) -> ObjectBucket:
        """Open an object store bucket, creating it if missing."""
        return ObjectBucket(
            self.loop,
            bucket,
            self.call(open_object_store(self._js, bucket, self._streams[1].replicas, self._api_denials), timeout=120),
        )
