"""The process's NATS connection, on its own asyncio thread, with a blocking API for actors.

One `Bus` per process (design.md §Engines/§Delivery): every actor of the process shares it. Actor
threads call its methods; work hops onto the bus thread through an outbox (one wake-up per burst).
Incoming messages hop the other way as `Delivery` objects told into an actor's mailbox. Encoding and
decoding happen in the caller's or the actor's thread, never on the bus thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js import api as js_api

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.connect import check_reachable
from mgrpo_actors.runtime.consumer import Consumer
from mgrpo_actors.runtime.delivery import Delivery
from mgrpo_actors.runtime.errors import BusConnectError, BusError, NoResponders, RemoteFailure, RequestTimeout
from mgrpo_actors.runtime.kv import KvBucket
from mgrpo_actors.runtime.targets import Target, tell
from protocols import DEFAULT_MAX_BYTES, DeadLetter, Failure, Message, Subjects, decode, encode

__all__ = ["Bus", "Subscription"]

T = TypeVar("T")

log = get_logger(__name__)

# A dead letter keeps at most this much of the original payload (less if the size limit is smaller).
_DLQ_PAYLOAD_BYTES = 64 * 1024
# Room a dead letter needs besides the payload (envelope, subject, reason <= 4000 chars, names).
_DLQ_OVERHEAD_BYTES = 6 * 1024
# A blocking request waits this much longer than its own timeout before giving up on the bus itself.
_REQUEST_GRACE_S = 5.0


@dataclass
class Subscription:
    """A core NATS subscription feeding a target; `stop()` unsubscribes."""

    bus: Bus
    subject: str
    queue: str
    _sub: Any = None

    def stop(self) -> None:
        # Also while disconnected: nats-py then drops the subscription from what it restores on reconnect.
        if self._sub is not None and self.bus.loop_running:
            try:
                self.bus.call(self._sub.unsubscribe(), timeout=5)
            except Exception as exc:
                log.warning("unsubscribe failed", subject=self.subject, error=str(exc))
        self._sub = None


class Bus:
    """One NATS connection on its own asyncio thread; thread-safe blocking API."""

    def __init__(
        self,
        url: str,
        *,
        run_id: str,
        node: str = "",
        connect_timeout_s: float = 3.0,
        max_reconnect_attempts: int = 60,
        reconnect_wait_s: float = 1.0,
        request_timeout_s: float = 30.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        on_connection_lost: Callable[[], None] | None = None,
    ) -> None:
        self.url = url
        self.subjects = Subjects(run_id)
        self.run_id = run_id
        self.node = node
        self.max_bytes = max_bytes
        self.request_timeout_s = request_timeout_s
        # Called (on the bus thread) when NATS is gone for good: reconnect attempts are used up.
        self.on_connection_lost = on_connection_lost
        self._connect_timeout_s = connect_timeout_s
        self._max_reconnect_attempts = max_reconnect_attempts
        self._reconnect_wait_s = reconnect_wait_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"nats-bus-{node or 'proc'}", daemon=True)
        self._nc: Any = None
        self._js: Any = None
        self._subscriptions: list[Subscription] = []
        self._consumers: list[Consumer] = []
        self._counter_lock = threading.Lock()
        self.dead_letters: collections.Counter[str] = collections.Counter()
        self.reconnects = 0
        self._closing = False  # our own close/drain has begun: no more sends
        self._outbox: list[tuple] = []
        self._outbox_lock = threading.Lock()
        self._pump_scheduled = False
        self._reply_prefix = ""
        self._reply_tokens = itertools.count(1)
        # token -> [future, timeout timer, subject, timeout, request bytes, retried after no-responders]
        self._awaiting_reply: dict[str, list[Any]] = {}

    # ---- lifecycle ---------------------------------------------------------------------------
    def connect(self) -> Bus:
        """Start the bus thread and connect within connect_timeout_s; else BusConnectError naming the URL."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._connect(), self.loop)
        try:
            future.result(self._connect_timeout_s + 1)
        except BusConnectError:
            self._stop_loop()
            raise
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._stop_loop()
            raise BusConnectError(self.url, f"no NATS handshake within {self._connect_timeout_s:g} s (is it a NATS server?)") from None
        return self

    def __enter__(self) -> Bus:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected and self.loop.is_running()

    @property
    def loop_running(self) -> bool:
        return self.loop.is_running() and not self.loop.is_closed()

    async def _connect(self) -> None:
        async def on_disconnect() -> None:
            if not self._closing:
                log.warning("nats disconnected", url=self.url)

        async def on_reconnect() -> None:
            self.reconnects += 1
            log.info("nats reconnected", url=self.url, reconnects=self.reconnects)

        async def on_error(exc: Exception) -> None:
            log.warning("nats error", url=self.url, error=str(exc))

        async def on_closed() -> None:
            if not self._closing:
                log.error("nats connection lost for good: reconnect attempts used up", url=self.url, attempts=self._max_reconnect_attempts)
                if self.on_connection_lost is not None:
                    self.on_connection_lost()

        await check_reachable(self.url, self._connect_timeout_s)
        try:
            self._nc = await nats.connect(
                self.url,
                name=f"mgrpo:{self.run_id}:{self.node}",
                connect_timeout=self._connect_timeout_s,
                allow_reconnect=True,
                max_reconnect_attempts=self._max_reconnect_attempts,
                reconnect_time_wait=self._reconnect_wait_s,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
                error_cb=on_error,
                closed_cb=on_closed,
            )
        except Exception as exc:  # NoServersError, OSError, TimeoutError, invalid URL, ...
            raise BusConnectError(self.url, f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        if self._nc.max_payload < self.max_bytes:
            # A message the server would refuse must fail at encode, with a clear error, not vanish.
            log.warning("nats-server max_payload is below the configured message limit; using it", url=self.url, server_max_payload=self._nc.max_payload, configured=self.max_bytes)
            self.max_bytes = self._nc.max_payload
        self._js = self._nc.jetstream()
        self._reply_prefix = self._nc.new_inbox()
        await self._nc.subscribe(f"{self._reply_prefix}.*", cb=self._on_reply)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _stop_loop(self) -> None:
        self._closing = True
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self._fail_awaiting)
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        if not self._thread.is_alive() and not self.loop.is_closed():
            self.loop.close()
        self._fail_awaiting()  # anything sent after the loop stopped

    def stop_intake(self) -> None:
        """First step of a graceful stop: no new deliveries; what is in mailboxes can still finish."""
        for sub in self._subscriptions:
            sub.stop()
        for consumer in self._consumers:
            consumer.stop_fetching()

    def drain(self, timeout_s: float = 10.0) -> None:
        """Graceful stop: stop consumers (naking unsettled work), send the outbox, drain, close."""
        self._finish(lambda: self._nc.drain(), timeout_s)

    def close(self) -> None:
        """Stop consumers, send what is in the outbox, close."""
        self._finish(lambda: self._nc.close(), 5.0)

    def _finish(self, last: Callable[[], Coroutine[Any, Any, Any]], timeout_s: float) -> None:
        for consumer in list(self._consumers):
            consumer.stop()
        self._consumers.clear()
        if self._nc is not None and not self._nc.is_closed and self.loop_running:
            self._closing = True  # before the final call: our own close is not "connection lost"
            try:
                self.call(self._flush_outbox_then(last()), timeout=timeout_s)
            except Exception as exc:
                log.warning("nats close incomplete", error=f"{type(exc).__name__}: {exc}")
        self._stop_loop()

    # ---- hopping onto the bus thread --------------------------------------------------------
    def _not_on_bus_thread(self, what: str) -> None:
        if threading.current_thread() is self._thread:
            raise BusError(f"{what} from the bus thread would deadlock: deliver to an actor instead")

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run `coro` on the bus thread and wait for its result."""
        try:
            self._not_on_bus_thread("Bus.call")
            if not self.loop_running:
                raise BusError(f"bus to {self.url} is closed")
        except BusError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T] | None:
        """Run `coro` on the bus thread without waiting; failures are logged."""
        if not self.loop_running:
            coro.close()
            return None
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        fut.add_done_callback(_log_failure)
        return fut

    # ---- core NATS ---------------------------------------------------------------------------
    def _encode(self, message: Message | bytes) -> bytes:
        return message if isinstance(message, (bytes, bytearray)) else encode(message, self.max_bytes)

    def publish(self, subject: str, message: Message | bytes, headers: dict[str, str] | None = None, reply: str = "") -> None:
        """Fire-and-forget publish, in order with this process's other publishes; BusError once closed."""
        self._send(("pub", subject, self._encode(message), headers, reply))

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until the server has everything published so far."""
        self.call(self._flush_outbox_then(self._nc.flush(timeout=timeout_s)), timeout=timeout_s + 1)

    def request(self, subject: str, message: Message | bytes, timeout_s: float | None = None) -> Message:
        """Send a request and wait for the decoded reply (timeout default: request_timeout_s).

        Raises RequestTimeout, NoResponders, RemoteFailure (the responder replied with a Failure),
        ProtocolError (the reply did not decode) or BusError (the bus closed meanwhile).
        """
        self._not_on_bus_thread("Bus.request")
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        future = self.request_future(subject, message, timeout_s)
        try:
            return future.result(timeout_s + _REQUEST_GRACE_S)
        except concurrent.futures.TimeoutError:
            raise BusError(f"no reply or timeout on {subject}: the bus to {self.url} stopped answering") from None

    def request_future(self, subject: str, message: Message | bytes, timeout_s: float | None = None) -> concurrent.futures.Future:
        """`request` without waiting: a Future of the decoded reply (for many requests in flight)."""
        outer = _ReplyFuture()
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        self._send(("req", subject, self._encode(message), outer, timeout_s))
        return outer

    # The outbox: any thread appends operations; one wake-up of the bus thread sends them all, in
    # order, from one task. Replies come back on one wildcard inbox subscription and complete the
    # caller's Future directly: one call_soon_threadsafe per burst, no Task or asyncio.wait_for per
    # request (see `mgrpo bench bus`).
    def _send(self, op: tuple) -> None:
        with self._outbox_lock:
            if (self._closing and not self.loop_running) or self.loop.is_closed():
                raise BusError(f"bus to {self.url} is closed")
            self._outbox.append(op)
            if self._pump_scheduled:
                return
            self._pump_scheduled = True
        self.loop.call_soon_threadsafe(self._start_pump)

    def _start_pump(self) -> None:
        self.loop.create_task(self._pump())

    async def _pump(self) -> None:
        """Send everything in the outbox, in order, until it stays empty."""
        while True:
            with self._outbox_lock:
                ops, self._outbox = self._outbox, []
                if not ops:
                    self._pump_scheduled = False
                    return
            for op in ops:
                await self._run_op(op)

    async def _run_op(self, op: tuple) -> None:
        if op[0] == "pub":
            _, subject, data, headers, reply = op
            try:
                await self._nc.publish(subject, data, reply=reply, headers=headers)
            except Exception as exc:
                log.warning("publish failed", subject=subject, error=f"{type(exc).__name__}: {exc}")
            return
        _, subject, data, outer, timeout_s = op
        token = str(next(self._reply_tokens))
        timer = self.loop.call_later(timeout_s, self._expire_request, token)
        self._awaiting_reply[token] = [outer, timer, subject, timeout_s, data, False]
        await self._publish_request(token)

    async def _publish_request(self, token: str) -> None:
        entry = self._awaiting_reply.get(token)
        if entry is None:  # expired meanwhile
            return
        try:
            await self._nc.publish(entry[2], entry[4], reply=f"{self._reply_prefix}.{token}")
        except Exception as exc:
            self._complete(token, BusError(f"request on {entry[2]} not sent: {type(exc).__name__}: {exc}"))

    async def _on_reply(self, msg: Any) -> None:
        token = msg.subject.rsplit(".", 1)[-1]
        entry = self._awaiting_reply.get(token)
        if entry is None:  # the request timed out already
            return
        if msg.headers and msg.headers.get("Status") == "503":
            if not entry[5]:
                # One retry after a round trip: nats-server can answer "no responders" to a connection's
                # first publish after another connection subscribed, even once that one flushed.
                entry[5] = True
                self.loop.create_task(self._retry_request(token))
                return
            self._complete(token, NoResponders(entry[2]))
            return
        self._complete(token, _Reply(msg.data, entry[2], self.max_bytes))

    async def _retry_request(self, token: str) -> None:
        try:
            await self._nc.flush(timeout=1)
        except Exception:
            pass
        await self._publish_request(token)

    def _complete(self, token: str, outcome: Any) -> None:
        entry = self._awaiting_reply.pop(token, None)
        if entry is None:
            return
        outer, timer = entry[0], entry[1]
        timer.cancel()
        if outer.done():  # cancelled by the caller
            return
        if isinstance(outcome, BaseException):
            outer.set_exception(outcome)
        else:
            outer.set_result(outcome)

    def _expire_request(self, token: str) -> None:
        entry = self._awaiting_reply.get(token)
        if entry is not None:
            self._complete(token, RequestTimeout(entry[2], entry[3]))

    def _fail_awaiting(self) -> None:
        for token in list(self._awaiting_reply):
            self._complete(token, BusError(f"bus closed before the reply on {self._awaiting_reply[token][2]} came"))
        with self._outbox_lock:
            ops, self._outbox = self._outbox, []
        for op in ops:
            if op[0] == "req" and not op[3].done():
                op[3].set_exception(BusError(f"bus closed before the request on {op[1]} was sent"))

    async def _flush_outbox_then(self, coro: Coroutine[Any, Any, T]) -> T:
        while self._pump_scheduled:  # let the outbox empty first, so what follows covers earlier publishes
            await asyncio.sleep(0.001)
        return await coro

    def subscribe(self, subject: str, target: Target, queue: str = "") -> Subscription:
        """Tell `target` a Delivery for every message on `subject` (one of a queue group if `queue`)."""

        async def on_msg(msg: Any) -> None:
            delivery = Delivery(msg.subject, msg.data, msg.reply, msg.headers, bus=self)
            if not tell(target, delivery) and msg.reply:
                # The actor is gone: tell the requester now rather than let it time out.
                await self._nc.publish(msg.reply, encode(Failure(subject=msg.subject, reason="the actor serving this subject has stopped", error_type="ActorStopped")))

        async def _sub() -> Any:
            sub = await self._nc.subscribe(subject, queue=queue, cb=on_msg)
            await self._nc.flush()  # the server knows the subscription once this returns
            return sub

        sub = Subscription(self, subject, queue, self.call(_sub()))
        self._subscriptions.append(sub)
        return sub

    # ---- JetStream --------------------------------------------------------------------------
    def ensure_streams(self, max_age_s: float = 7 * 24 * 3600) -> list[str]:
        """Create or update every stream of the run (protocols.Subjects.streams); returns their names.

        Raises BusError saying so when the server has no JetStream.
        """

        async def _ensure() -> list[str]:
            for name, subjects in self.subjects.streams().items():
                config = js_api.StreamConfig(
                    name=name,
                    subjects=subjects,
                    storage=js_api.StorageType.FILE,
                    retention=js_api.RetentionPolicy.LIMITS,
                    max_age=max_age_s,
                    max_msg_size=self.max_bytes,
                )
                try:
                    await self._js.stream_info(name)
                    exists = True
                except nats.js.errors.NotFoundError:
                    exists = False
                await (self._js.update_stream(config) if exists else self._js.add_stream(config))
            return list(self.subjects.streams())

        try:
            return self.call(_ensure())
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            raise BusError(f"JetStream is not enabled at {self.url}: start nats-server with -js (or `jetstream {{}}` in its config)") from None

    def add_stream(self, name: str, subjects: list[str]) -> None:
        """Create one stream (used by tests and benchmarks for ad-hoc streams)."""
        self.call(self._js.add_stream(name=name, subjects=subjects, max_msg_size=self.max_bytes))

    def js_publish(self, subject: str, message: Message | bytes, timeout_s: float = 5.0) -> int:
        """Publish into a stream and wait for the server's ack; returns the stream sequence."""
        data = self._encode(message)
        ack = self.call(self._flush_outbox_then(self._js.publish(subject, data, timeout=timeout_s)), timeout=timeout_s + 1)
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

        At most `batch` deliveries are unsettled at a time (backpressure). `max_deliver` -1 (default)
        never drops a message that keeps coming back: nothing accepted is lost silently.
        """
        consumer = Consumer(self, stream, durable, subject or "", target, batch)

        async def _start() -> asyncio.Task:
            config = js_api.ConsumerConfig(
                durable_name=durable,
                ack_policy=js_api.AckPolicy.EXPLICIT,
                ack_wait=ack_wait_s,
                max_ack_pending=max_ack_pending,
                max_deliver=max_deliver,
            )
            filter_subject = subject or ">"
            psub = await self._js.pull_subscribe(filter_subject, durable=durable, stream=stream, config=config)
            return asyncio.ensure_future(consumer.run(psub))

        consumer._task = self.call(_start())
        self._consumers.append(consumer)
        return consumer

    def kv(self, bucket: str, history: int = 1) -> KvBucket:
        """Open a KV bucket, creating it if missing."""

        async def _open() -> Any:
            try:
                return await self._js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                return await self._js.create_key_value(bucket=bucket, history=history)

        return KvBucket(self, bucket, self.call(_open()))

    # ---- dead letters -----------------------------------------------------------------------
    def dead_letter(self, delivery: Delivery, reason: str, error_type: str, actor: str = "") -> None:
        """Send an unprocessable delivery to `mgrpo.<run>.dlq.<subject>`, count it, answer its requester.

        Never raises: a dead letter that cannot be sent is logged, and the actor goes on. A message
        that was itself on a dead-letter subject is only logged and counted (no dlq.dlq.… loops).
        """
        with self._counter_lock:
            self.dead_letters[delivery.subject] += 1
        reason = reason[:4000]
        try:
            if delivery.subject.startswith(self.subjects.dlq(">")[:-1]):
                log.error("a dead letter could not be handled either", subject=delivery.subject, reason=reason)
            else:
                keep = max(0, min(_DLQ_PAYLOAD_BYTES, self.max_bytes - _DLQ_OVERHEAD_BYTES))
                letter = DeadLetter(delivery.subject, reason, error_type, bytes(delivery.data[:keep]), self.node, actor, time.time())
                self.publish(self.subjects.dlq(delivery.subject), letter)
            if delivery.reply:
                self.publish(delivery.reply, Failure(subject=delivery.subject, reason=reason, error_type=error_type))
        except Exception as exc:
            log.error("dead letter not sent", subject=delivery.subject, reason=reason, error=f"{type(exc).__name__}: {exc}")
        delivery.term()

    @property
    def dead_letter_total(self) -> int:
        with self._counter_lock:
            return sum(self.dead_letters.values())


def _log_failure(fut: concurrent.futures.Future) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("bus operation failed", error=f"{type(fut.exception()).__name__}: {fut.exception()}")


@dataclass(frozen=True)
class _Reply:
    data: bytes
    subject: str
    max_bytes: int


class _ReplyFuture(concurrent.futures.Future):
    """A Future of a request's reply, decoded in the thread that asks for the result (not the bus thread)."""

    def result(self, timeout: float | None = None) -> Message:  # type: ignore[override]
        raw = super().result(timeout)
        reply = decode(raw.data, raw.max_bytes)
        if isinstance(reply, Failure):
            raise RemoteFailure(raw.subject, reply.error_type, reply.reason)
        return reply
