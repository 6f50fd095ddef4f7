"""The process's NATS connection, on its own asyncio thread, with a blocking API for actors.

One `Bus` per process (design.md §Engines/§Delivery): every actor of the process shares it. Actor
threads call its methods; they hop onto the bus thread with `run_coroutine_threadsafe`. Incoming
messages hop the other way as `Delivery` objects told into an actor's mailbox. Encoding and
decoding happen in the caller's or the actor's thread, never on the bus thread.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import concurrent.futures
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, TypeVar

import nats
import nats.errors
import nats.js.errors
import pykka
from nats.js import api as js_api

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.delivery import Delivery, KvUpdate
from mgrpo_actors.runtime.errors import BusConnectError, BusError, NoResponders, RemoteFailure, RequestTimeout
from protocols import DEFAULT_MAX_BYTES, DeadLetter, Failure, Message, Subjects, decode, encode

__all__ = ["Bus", "Consumer", "KvBucket", "Subscription", "check_reachable", "connect_client"]

T = TypeVar("T")
Target = Any  # a pykka ActorRef (anything with .tell) or a plain callable taking a Delivery

log = get_logger(__name__)

# A dead letter keeps at most this much of the original payload (less if the size limit is smaller).
_DLQ_PAYLOAD_BYTES = 64 * 1024
# Room a dead letter needs besides the payload (envelope, subject, reason <= 4000 chars, names).
_DLQ_OVERHEAD_BYTES = 6 * 1024
# How long one pull request waits for messages; also the most a consumer's stop waits.
_FETCH_WAIT_S = 1.0


def _tell(target: Target, item: Any) -> None:
    try:
        if hasattr(target, "tell"):
            target.tell(item)
        else:
            target(item)
    except pykka.ActorDeadError:
        # Only possible while stopping: a stream message is redelivered later, a core one is gone.
        log.info("delivery to a stopped actor dropped", subject=getattr(item, "subject", ""))


@dataclass
class Subscription:
    """A core NATS subscription feeding a target; `stop()` unsubscribes."""

    bus: Bus
    subject: str
    queue: str
    _sub: Any = None

    def stop(self) -> None:
        if self._sub is not None and self.bus.connected:
            self.bus.call(self._sub.unsubscribe())
        self._sub = None


@dataclass
class Consumer:
    """A durable JetStream pull consumer feeding a target, with explicit ack.

    Messages are fetched in batches and told to the target; each must be settled (ack, nak or
    term) through its Delivery. `stop()` stops fetching and naks whatever was delivered but not
    settled, so a restarted consumer gets it again at once (at-least-once, nothing lost).
    """

    bus: Bus
    stream: str
    durable: str
    subject: str
    target: Target
    batch: int
    _task: asyncio.Task | None = None
    _inflight: dict[int, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    delivered: int = 0
    settled: collections.Counter = field(default_factory=collections.Counter)
    _stopping: bool = False

    def settle(self, delivery: Delivery, how: str, delay_s: float | None = None) -> None:
        with self._lock:
            msg = self._inflight.pop(id(delivery), None)
        if msg is None:
            return
        self.settled[how] += 1
        if how == "ack":
            coro = msg.ack()
        elif how == "nak":
            coro = msg.nak(delay=delay_s)
        else:
            coro = msg.term()
        self.bus.submit(coro)

    async def _fetch_loop(self, psub: Any) -> None:
        try:
            while not self._stopping:
                try:
                    msgs = await psub.fetch(self.batch, timeout=_FETCH_WAIT_S)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    continue
                except Exception as exc:  # disconnected, consumer deleted, ...: keep trying
                    log.warning("consumer fetch failed; retrying", stream=self.stream, durable=self.durable, error=str(exc))
                    await asyncio.sleep(0.5)
                    continue
                for msg in msgs:
                    if self._stopping:  # fetched while stopping: hand it back at once
                        await msg.nak()
                        self.settled["returned-unseen"] += 1
                        continue
                    self._deliver(msg)
        finally:
            # Close the pull subscription so the server sends nothing more to this dead inbox.
            try:
                await psub.unsubscribe()
            except Exception:
                pass

    def _deliver(self, msg: Any) -> None:
        delivery = Delivery(
            subject=msg.subject,
            data=msg.data,
            reply="",
            headers=msg.headers,
            js_msg=msg,
            consumer=self,
            bus=self.bus,
            num_delivered=msg.metadata.num_delivered if msg.metadata else 1,
        )
        with self._lock:
            self._inflight[id(delivery)] = msg
        self.delivered += 1
        _tell(self.target, delivery)

    def stop_fetching(self) -> None:
        """Fetch no more; what was delivered stays in flight until settled or `stop()`.

        The fetch in progress is allowed to finish (at most _FETCH_WAIT_S) rather than cancelled,
        so nothing it already received is lost between the server and the actor.
        """
        if self._task is None:
            return
        task, self._task = self._task, None
        self._stopping = True
        if not self.bus.connected:
            return
        try:
            self.bus.call(asyncio.wait_for(asyncio.shield(task), _FETCH_WAIT_S + 2))
        except Exception:
            self.bus.call(_cancel(task))

    def stop(self) -> None:
        """Stop fetching; nak what was delivered and not yet settled."""
        self.stop_fetching()
        with self._lock:
            pending, self._inflight = list(self._inflight.values()), {}
        if self.bus.connected:
            for msg in pending:
                self.bus.call(msg.nak())
            self.settled["nak-on-stop"] += len(pending)


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass


@dataclass
class KvBucket:
    """A JetStream KV bucket with a blocking API."""

    bus: Bus
    name: str
    _kv: Any

    def get(self, key: str) -> bytes | None:
        async def _get() -> bytes | None:
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
            return entry.value

        return self.bus.call(_get())

    def put(self, key: str, value: bytes | Message) -> int:
        data = encode(value, self.bus.max_bytes) if isinstance(value, Message) else value
        return self.bus.call(self._kv.put(key, data))

    def delete(self, key: str) -> None:
        self.bus.call(self._kv.delete(key))

    def keys(self) -> list[str]:
        async def _keys() -> list[str]:
            try:
                return list(await self._kv.keys())
            except nats.js.errors.NoKeysError:
                return []

        return self.bus.call(_keys())

    def watch(self, keys: str, target: Target, include_history: bool = False) -> Callable[[], None]:
        """Tell `target` a KvUpdate for every change of `keys` (wildcards allowed); returns a stop function."""

        async def _watch() -> asyncio.Task:
            watcher = await self._kv.watch(keys, include_history=include_history)

            async def pump() -> None:
                try:
                    async for entry in watcher:
                        if entry is None:  # marks the end of the initial values
                            continue
                        op = entry.operation or "PUT"
                        value = entry.value if op == "PUT" else None
                        _tell(target, KvUpdate(self.name, entry.key, value, entry.revision or 0, str(op)))
                finally:
                    await watcher.stop()

            return asyncio.ensure_future(pump())

        task = self.bus.call(_watch())
        return lambda: self.bus.call(_cancel(task)) if self.bus.connected else None


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
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.url = url
        self.subjects = Subjects(run_id)
        self.run_id = run_id
        self.node = node
        self.max_bytes = max_bytes
        self._connect_timeout_s = connect_timeout_s
        self._max_reconnect_attempts = max_reconnect_attempts
        self._reconnect_wait_s = reconnect_wait_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"nats-bus-{node or 'proc'}", daemon=True)
        self._nc: Any = None
        self._js: Any = None
        self._subscriptions: list[Subscription] = []
        self._consumers: list[Consumer] = []
        self.dead_letters: collections.Counter[str] = collections.Counter()
        self.reconnects = 0
        self._closing = False
        self._outbox: list[tuple] = []
        self._outbox_lock = threading.Lock()
        self._pump_scheduled = False
        self._reply_prefix = ""
        self._reply_tokens = itertools.count(1)
        # token -> (future, timeout timer, subject, timeout, request bytes, retried after no-responders)
        self._awaiting_reply: dict[str, tuple[concurrent.futures.Future, asyncio.TimerHandle, str, float, bytes, bool]] = {}

    # ---- lifecycle ---------------------------------------------------------------------------
    def connect(self) -> Bus:
        """Start the bus thread and connect; raises BusConnectError naming the URL on failure."""
        self._thread.start()
        try:
            self.call(self._connect(), timeout=self._connect_timeout_s + 5)
        except BusConnectError:
            self._stop_loop()
            raise
        except concurrent.futures.TimeoutError:
            self._stop_loop()
            raise BusConnectError(self.url, f"no connection within {self._connect_timeout_s:g} s") from None
        return self

    def __enter__(self) -> Bus:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected and self._loop.is_running()

    async def _connect(self) -> None:
        async def on_disconnect() -> None:
            if not self._closing:
                log.warning("nats disconnected", url=self.url)

        async def on_reconnect() -> None:
            self.reconnects += 1
            log.info("nats reconnected", url=self.url, reconnects=self.reconnects)

        async def on_error(exc: Exception) -> None:
            log.warning("nats error", url=self.url, error=str(exc))

        await self._check_reachable()
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
            )
        except Exception as exc:  # NoServersError, OSError, TimeoutError, invalid URL, ...
            raise BusConnectError(self.url, f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        self._js = self._nc.jetstream()
        self._reply_prefix = self._nc.new_inbox()
        await self._nc.subscribe(f"{self._reply_prefix}.*", cb=self._on_reply)

    async def _check_reachable(self) -> None:
        await check_reachable(self.url, self._connect_timeout_s)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._fail_awaiting)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def stop_intake(self) -> None:
        """First step of a graceful stop: no new deliveries; what is in mailboxes can still finish."""
        for sub in self._subscriptions:
            sub.stop()
        for consumer in self._consumers:
            consumer.stop_fetching()

    def drain(self, timeout_s: float = 10.0) -> None:
        """Graceful stop: stop consumers (naking unsettled work), then drain and close the connection."""
        self._closing = True
        for consumer in list(self._consumers):
            consumer.stop()
        self._consumers.clear()
        if self._nc is not None and self._nc.is_connected:
            try:
                self.call(self._nc.drain(), timeout=timeout_s)
            except Exception as exc:
                log.warning("nats drain incomplete", error=str(exc))
        self._stop_loop()

    def close(self) -> None:
        """Stop consumers and close now (drain() is the graceful variant)."""
        self._closing = True
        for consumer in list(self._consumers):
            consumer.stop()
        self._consumers.clear()
        if self._nc is not None and not self._nc.is_closed and self._loop.is_running():
            try:
                self.call(self._nc.close(), timeout=5)
            except Exception:
                pass
        self._stop_loop()

    # ---- hopping onto the bus thread --------------------------------------------------------
    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run `coro` on the bus thread and wait for its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise BusError("Bus.call from the bus thread would deadlock; use the async API there")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` on the bus thread without waiting; failures are logged."""
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        fut.add_done_callback(_log_failure)
        return fut

    # ---- core NATS ---------------------------------------------------------------------------
    def _encode(self, message: Message | bytes) -> bytes:
        return message if isinstance(message, (bytes, bytearray)) else encode(message, self.max_bytes)

    def publish(self, subject: str, message: Message | bytes, headers: dict[str, str] | None = None, reply: str = "") -> None:
        """Fire-and-forget publish, in order with this process's other publishes."""
        self._send(("pub", subject, self._encode(message), headers, reply))

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until the server has everything published so far."""
        self.call(self._flush_outbox_then(self._nc.flush(timeout=timeout_s)), timeout=timeout_s + 1)

    def request(self, subject: str, message: Message | bytes, timeout_s: float = 5.0) -> Message:
        """Send a request and wait for the decoded reply.

        Raises RequestTimeout, NoResponders, RemoteFailure (the responder replied with a Failure)
        or ProtocolError (the reply did not decode).
        """
        return self.request_future(subject, message, timeout_s).result()

    def request_future(self, subject: str, message: Message | bytes, timeout_s: float = 5.0) -> concurrent.futures.Future:
        """`request` without waiting: a Future of the decoded reply (for many requests in flight)."""
        outer = _ReplyFuture()
        self._send(("req", subject, self._encode(message), outer, timeout_s))
        return outer

    # The outbox: any thread appends operations; one wake-up of the bus thread sends them all, in
    # order, from one task. Replies come back on one wildcard inbox subscription and complete the
    # caller's Future directly. This keeps the runtime's cost over raw nats-py small (one
    # call_soon_threadsafe per burst, no Task or asyncio.wait_for per request; see `mgrpo bench bus`).
    def _send(self, op: tuple) -> None:
        with self._outbox_lock:
            self._outbox.append(op)
            if self._pump_scheduled:
                return
            self._pump_scheduled = True
        self._loop.call_soon_threadsafe(self._start_pump)

    def _start_pump(self) -> None:
        self._loop.create_task(self._pump())

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
        timer = self._loop.call_later(timeout_s, self._expire_request, token)
        self._awaiting_reply[token] = (outer, timer, subject, timeout_s, data, False)
        try:
            await self._nc.publish(subject, data, reply=f"{self._reply_prefix}.{token}")
        except Exception as exc:
            self._awaiting_reply.pop(token, None)
            timer.cancel()
            outer.set_exception(BusError(f"request on {subject} not sent: {type(exc).__name__}: {exc}"))

    async def _on_reply(self, msg: Any) -> None:
        token = msg.subject.rsplit(".", 1)[-1]
        entry = self._awaiting_reply.pop(token, None)
        if entry is None:  # the request timed out already
            return
        outer, timer, subject, _, data, retried = entry
        if msg.headers and msg.headers.get("Status") == "503":
            if not retried:
                self._loop.create_task(self._retry_request(token, entry))
                return
            timer.cancel()
            outer.set_exception(NoResponders(subject))
            return
        timer.cancel()
        if not outer.done():
            outer.set_result(_Reply(msg.data, subject, self.max_bytes))

    async def _retry_request(self, token: str, entry: tuple) -> None:
        """One retry after a round trip to the server: nats-server can answer "no responders" to a
        connection's first publish after another connection subscribed, even once that one flushed."""
        outer, timer, subject, timeout_s, data, _ = entry
        try:
            await self._nc.flush(timeout=max(0.1, timeout_s))
            self._awaiting_reply[token] = (outer, timer, subject, timeout_s, data, True)
            await self._nc.publish(subject, data, reply=f"{self._reply_prefix}.{token}")
        except Exception as exc:
            self._awaiting_reply.pop(token, None)
            timer.cancel()
            if not outer.done():
                outer.set_exception(BusError(f"request on {subject} not sent: {type(exc).__name__}: {exc}"))

    def _expire_request(self, token: str) -> None:
        entry = self._awaiting_reply.pop(token, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(RequestTimeout(entry[2], entry[3]))

    def _fail_awaiting(self) -> None:
        awaiting, self._awaiting_reply = self._awaiting_reply, {}
        for outer, timer, subject, *_ in awaiting.values():
            timer.cancel()
            if not outer.done():
                outer.set_exception(BusError(f"bus closed before the reply on {subject} came"))

    async def _flush_outbox_then(self, coro: Coroutine[Any, Any, T]) -> T:
        while self._pump_scheduled:  # let the outbox empty first, so flush covers earlier publishes
            await asyncio.sleep(0.001)
        return await coro

    def subscribe(self, subject: str, target: Target, queue: str = "") -> Subscription:
        """Tell `target` a Delivery for every message on `subject` (one of a queue group if `queue`)."""

        async def on_msg(msg: Any) -> None:
            _tell(target, Delivery(msg.subject, msg.data, msg.reply, msg.headers, bus=self))

        async def _sub() -> Any:
            sub = await self._nc.subscribe(subject, queue=queue, cb=on_msg)
            await self._nc.flush()  # the server knows the subscription once this returns
            return sub

        sub = Subscription(self, subject, queue, self.call(_sub()))
        self._subscriptions.append(sub)
        return sub

    # ---- JetStream --------------------------------------------------------------------------
    def ensure_streams(self, max_age_s: float = 7 * 24 * 3600) -> list[str]:
        """Create (or update) every stream of the run (protocols.Subjects.streams); returns their names."""

        async def _ensure() -> list[str]:
            names = []
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
                    await self._js.add_stream(config)
                except nats.js.errors.BadRequestError:
                    await self._js.update_stream(config)
                names.append(name)
            return names

        return self.call(_ensure())

    def add_stream(self, name: str, subjects: list[str]) -> None:
        """Create one stream (used by tests and benchmarks for ad-hoc streams)."""
        self.call(self._js.add_stream(name=name, subjects=subjects, max_msg_size=self.max_bytes))

    def js_publish(self, subject: str, message: Message | bytes, timeout_s: float = 5.0) -> int:
        """Publish into a stream and wait for the server's ack; returns the stream sequence."""
        data = self._encode(message)
        ack = self.call(self._js.publish(subject, data, timeout=timeout_s), timeout=timeout_s + 1)
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
        max_deliver: int = 5,
    ) -> Consumer:
        """Feed `target` from a durable pull consumer (created if missing, resumed if present)."""
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
            return asyncio.ensure_future(consumer._fetch_loop(psub))

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

        Never raises: a dead letter that cannot be sent is logged, and the actor goes on.
        """
        self.dead_letters[delivery.subject] += 1
        reason = reason[:4000]
        keep = max(0, min(_DLQ_PAYLOAD_BYTES, self.max_bytes - _DLQ_OVERHEAD_BYTES))
        letter = DeadLetter(
            subject=delivery.subject,
            reason=reason,
            error_type=error_type,
            payload=bytes(delivery.data[:keep]),
            node=self.node,
            actor=actor,
            failed_at=time.time(),
        )
        try:
            self.publish(self.subjects.dlq(delivery.subject), letter)
            if delivery.reply:
                self.publish(delivery.reply, Failure(subject=delivery.subject, reason=reason, error_type=error_type))
        except Exception as exc:
            log.error("dead letter not sent", subject=delivery.subject, reason=reason, error=f"{type(exc).__name__}: {exc}")
        delivery.term()

    @property
    def dead_letter_total(self) -> int:
        return sum(self.dead_letters.values())


async def check_reachable(url: str, timeout_s: float) -> None:
    """Raise BusConnectError unless one server of `url` (comma-separated) accepts a TCP connection.

    nats-py retries an unreachable first server for a long time; this fails fast with the URL named.
    """
    errors = []
    for server in url.split(","):
        server = server.strip()
        parsed = urllib.parse.urlparse(server if "://" in server else f"nats://{server}")
        try:
            host, port = parsed.hostname or "127.0.0.1", parsed.port or 4222
        except ValueError as exc:
            raise BusConnectError(url, f"invalid URL: {exc}") from None
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
            writer.close()
            return
        except (OSError, asyncio.TimeoutError) as exc:
            errors.append(f"{host}:{port}: {type(exc).__name__}: {exc}".rstrip(": "))
    raise BusConnectError(url, "; ".join(errors))


async def connect_client(url: str, name: str, timeout_s: float = 3.0) -> Any:
    """A plain nats-py connection for short-lived tools (tap, ping): fails fast, logs quietly."""
    await check_reachable(url, timeout_s)

    async def quiet(exc: Exception) -> None:
        log.debug("nats error", url=url, error=str(exc))

    try:
        return await nats.connect(url, name=name, connect_timeout=timeout_s, max_reconnect_attempts=3, error_cb=quiet)
    except Exception as exc:
        raise BusConnectError(url, f"{type(exc).__name__}: {exc}") from None


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
