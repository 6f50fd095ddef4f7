"""The process's NATS connection, on its own asyncio thread, with a blocking API for actors.

One `Bus` per process (docs/architecture.md §Engines/§Delivery): every actor of the process shares it. Actor
threads call its methods; work hops onto the bus thread through the outbox (outbox.py, one wake-up
per burst); replies come back through one inbox subscription (requests.py). Incoming messages hop
the other way as `Delivery` objects told into an actor's mailbox. Encoding and decoding happen in
the caller's or the actor's thread, never on the bus thread.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.audit import DeliveryLog
from mgrpo_actors.runtime.bus_jetstream import JetStreamCalls
from mgrpo_actors.runtime.connect import check_reachable, server_list
from mgrpo_actors.runtime.connection_events import ConnectionEvents
from mgrpo_actors.runtime.consumer import Consumer
from mgrpo_actors.runtime.deadletter import send_dead_letter
from mgrpo_actors.runtime.delivery import Delivery
from mgrpo_actors.runtime.errors import BusConnectError, BusError
from mgrpo_actors.runtime.jetstream import ApiDenials, StreamLimits
from mgrpo_actors.runtime.loop import BusLoop
from mgrpo_actors.runtime.outbox import Outbox, PublishOp, SendOp
from mgrpo_actors.runtime.requests import ReplyFuture, ReplyRouter, RequestOp
from mgrpo_actors.runtime.security import ConnectSecurity, explain_connect_error, plaintext_refusal
from mgrpo_actors.runtime.slow_consumers import SlowConsumers
from mgrpo_actors.runtime.store_full import StoreWatch
from mgrpo_actors.runtime.subscription import Subscription, mailbox_feeder
from mgrpo_actors.runtime.targets import Target
from protocols import DEFAULT_MAX_BYTES, DEFAULT_SUB_TYPE, Message, Subjects, encode
from protocols.durables import durables, work_durables

__all__ = ["Bus", "Subscription"]

T = TypeVar("T")

log = get_logger(__name__)

# A blocking request waits this much longer than its own timeout before giving up on the bus itself.
_REQUEST_GRACE_S = 5.0


class Bus(JetStreamCalls):
    """One NATS connection on its own asyncio thread; thread-safe blocking API (its JetStream calls:
    bus_jetstream.py)."""

    def __init__(
        self,
        url: str,
        *,
        run_id: str,
        node: str = "",
        connect_timeout_s: float = 3.0,
        max_reconnect_attempts: int = 60,
        reconnect_wait_s: float = 1.0,
        ping_interval_s: float = 5.0,
        request_timeout_s: float = 30.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        on_connection_lost: Callable[[], None] | None = None,
        deliveries_dir: str | None = None,
        mailbox_limit: int = 256,
        pending_bytes_limit: int = 64 * 1024 * 1024,
        security: ConnectSecurity | None = None,
        store_dir: str | os.PathLike[str] | None = None,
        sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,),
    ) -> None:
        """store_dir: the JetStream store of the server this process started (EmbeddedNats.jetstream_dir), so a
        write it leaves unanswered on a full disk stops the run saying so (runtime/store_full.py). sub_types: the
        run's sub-agent types (NodeConfig.sub_types), whose sides' subjects and durables the bus names."""
        self.url = url
        self.subjects = Subjects(run_id, sub_types)
        self.durables = durables(sub_types)  # the run's durable consumers by name (protocols/durables.py)
        self.work_durables = work_durables(sub_types)
        self.run_id = run_id
        self.node = node
        self.max_bytes = max_bytes
        self.request_timeout_s = request_timeout_s
        self.mailbox_limit = mailbox_limit  # a subscription's deliveries waiting in its actor's mailbox, at most
        # then nats-py queues this much per subscription; beyond it drops (counted)
        self.pending_bytes_limit = pending_bytes_limit
        self.slow_consumers = SlowConsumers(
            node, lambda metric: self.publish_now(self.subjects.metrics(metric.name), encode(metric))
        )
        # Called (on the bus thread) when NATS is gone for good: reconnect attempts are used up.
        self.on_connection_lost = on_connection_lost
        # Called (on the actor's thread) with (actor name, error) when an actor of this process died.
        self.on_actor_failed: Callable[[str, str], None] | None = None
        # Called (on the actor's thread) with why, when a role stops the run unfinished (the controller's watchdog,
        # or a write that found the server's store full).
        self.on_run_stopped: Callable[[str], None] | None = None
        # Writes into the server's store that fail for want of room: StoreFull, and the run stopped (once).
        self.store_watch = StoreWatch(store_dir, url, self.stop_run)
        self._connect_timeout_s = connect_timeout_s
        self._max_reconnect_attempts = max_reconnect_attempts
        self._reconnect_wait_s = reconnect_wait_s
        self._security = security  # user, password, TLS, inbox prefix (runtime/security.py)
        self._connect_error: BaseException | None = None
        self._api_denials = ApiDenials()  # JetStream calls the server refused this user: failed at once, not retried
        # a deaf connection (dead read loop, frozen server) is stale after 2 unanswered pings
        self._ping_interval_s = ping_interval_s
        self.loop = BusLoop(name=f"nats-bus-{node or 'proc'}", describe=url)
        self._nc: Any = None
        self._js: Any = None
        # what ensure_streams made: recreated if lost
        self._streams: tuple[list[str], StreamLimits] = ([], StreamLimits())
        self._purge_failed: set[str] = set()
        self._purge_refused: set[str] = set()
        self._subscriptions: list[Subscription] = []
        self._consumers: list[Consumer] = []
        self._counter_lock = threading.Lock()
        self.dead_letters: collections.Counter[str] = collections.Counter()
        self.reconnects = 0
        self._closing = False  # our own close/drain has begun: no more sends
        # What this process receives, one line per message, when auditing is on (runtime/audit.py).
        self.audit = DeliveryLog(deliveries_dir, node or "proc", max_bytes) if deliveries_dir else None
        self._replies = ReplyRouter(self.audit)
        self._outbox = Outbox(
            self.loop, self._send_op, refuse=lambda: (self._closing and not self.loop.running) or self.loop.closed
        )

    # ---- lifecycle ---------------------------------------------------------------------------
    def connect(self) -> Bus:
        """Start the bus thread and connect within connect_timeout_s; else BusConnectError naming the URL."""
        try:
            self.loop.start()
        except BusError as exc:  # its thread did not get the loop running: said as the connection's failure
            self._stop_loop()
            raise BusConnectError(self.url, str(exc)) from None
        future = self.loop.submit(self._connect())
        assert future is not None
        try:
            # nats-py tries the servers one by one
            future.result(self._connect_timeout_s * (len(server_list(self.url)) + 1) + 1)
        except BusConnectError:
            self._stop_loop()
            raise
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._stop_loop()
            # nats-py keeps retrying a TLS or authorization failure: say what failed
            if self._connect_error is not None:
                raise BusConnectError(self.url, explain_connect_error(self._connect_error, self._security)) from None
            raise BusConnectError(
                self.url, f"no NATS handshake within {self._connect_timeout_s:g} s (is it a NATS server?)"
            ) from None
        return self

    def __enter__(self) -> Bus:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected and self.loop.running

    async def _connect(self) -> None:
        events = ConnectionEvents(self)
        await check_reachable(self.url, self._connect_timeout_s)
        try:
            self._nc = await nats.connect(
                server_list(self.url),
                name=f"mgrpo:{self.run_id}:{self.node}",
                connect_timeout=self._connect_timeout_s,
                allow_reconnect=True,
                max_reconnect_attempts=self._max_reconnect_attempts,
                reconnect_time_wait=self._reconnect_wait_s,
                ping_interval=self._ping_interval_s,
                max_outstanding_pings=2,
                **events.callbacks(),
                **(self._security.nats_options() if self._security else {}),
            )
        except Exception as exc:  # NoServersError, OSError, TimeoutError, invalid URL, TLS, authorization, ...
            raise BusConnectError(self.url, explain_connect_error(exc, self._security)) from None
        if refusal := plaintext_refusal(self._nc, self._security):
            self._closing = True  # our own close: not "connection lost"
            await self._nc.close()
            raise BusConnectError(self.url, refusal)
        if self._nc.max_payload < self.max_bytes:
            # A message the server would refuse must fail at encode, with a clear error, not vanish.
            log.warning(
                "nats-server max_payload is below the configured message limit; using it",
                url=self.url,
                server_max_payload=self._nc.max_payload,
                configured=self.max_bytes,
            )
            self.max_bytes = self._nc.max_payload
        self._js = self._nc.jetstream()
        await self._replies.open(self._nc)

    def stop_run(self, why: str) -> None:
        """Stop the run saying why (`on_run_stopped`: the node then exits 3); nothing where no node listens."""
        if self.on_run_stopped is not None:
            self.on_run_stopped(why)

    def _stop_loop(self) -> None:
        self._closing = True
        self.loop.stop(before_stop=self._fail_awaiting)
        self._fail_awaiting()  # anything sent after the loop stopped

    def stop_fetching(self) -> None:
        """First step of a graceful stop: no new stream work (subscriptions still serve requests)."""
        for consumer in self._consumers:
            consumer.stop_fetching()

    def stop_intake(self) -> None:
        """No new deliveries at all; what is in mailboxes can still finish."""
        for sub in self._subscriptions:
            sub.stop()
        self.stop_fetching()

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
        if self._nc is not None and not self._nc.is_closed and self.loop.running:
            self._closing = True  # before the final call: our own close is not "connection lost"
            try:
                self.call(self._after_outbox(last()), timeout=timeout_s)
            except Exception as exc:
                log.warning("nats close incomplete", error=f"{type(exc).__name__}: {exc}")
        self._stop_loop()
        if self.audit is not None:
            self.audit.close()

    def _fail_awaiting(self) -> None:
        self._replies.fail_all(lambda subject: BusError(f"bus closed before the reply on {subject} came"))
        for op in self._outbox.take_all():
            if isinstance(op, RequestOp) and not op.future.done():
                op.future.set_exception(BusError(f"bus closed before the request on {op.subject} was sent"))

    # ---- hopping onto the bus thread --------------------------------------------------------
    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run `coro` on the bus thread and wait for its result."""
        return self.loop.call(coro, timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T] | None:
        """Run `coro` on the bus thread without waiting; failures are logged."""
        return self.loop.submit(coro)

    async def _after_outbox(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro` once the outbox has emptied, so what it does covers every earlier publish."""
        await self._outbox.drained()
        return await coro

    async def _send_op(self, op: SendOp) -> None:
        if isinstance(op, RequestOp):
            await self._replies.send(op)
            return
        try:
            await self._nc.publish(op.subject, op.data, reply=op.reply, headers=op.headers)
        except Exception as exc:
            log.warning("publish failed", subject=op.subject, error=f"{type(exc).__name__}: {exc}")

    # ---- core NATS ---------------------------------------------------------------------------
    def _encode(self, message: Message | bytes) -> bytes:
        return message if isinstance(message, (bytes, bytearray)) else encode(message, self.max_bytes)

    def publish(
        self, subject: str, message: Message | bytes, headers: dict[str, str] | None = None, reply: str = ""
    ) -> None:
        """Fire-and-forget publish, in order with this process's other publishes; BusError once closed."""
        self._outbox.put(PublishOp(subject, self._encode(message), headers, reply))

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until the server has everything published so far."""
        self.call(self._after_outbox(self._nc.flush(timeout=timeout_s)), timeout=timeout_s + 1)

    def request(self, subject: str, message: Message | bytes, timeout_s: float | None = None) -> Message:
        """Send a request and wait for the decoded reply (timeout default: request_timeout_s).

        Raises RequestTimeout, NoResponders, RemoteFailure (the responder replied with a Failure),
        ProtocolError (the reply did not decode) or BusError (the bus closed meanwhile).
        """
        self.loop.require_other_thread("Bus.request")
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        future = self.request_future(subject, message, timeout_s)
        try:
            return future.result(timeout_s + _REQUEST_GRACE_S)
        except concurrent.futures.TimeoutError:
            raise BusError(f"no reply or timeout on {subject}: the bus to {self.url} stopped answering") from None

    def request_future(self, subject: str, message: Message | bytes, timeout_s: float | None = None) -> ReplyFuture:
        """`request` without waiting: a Future of the decoded reply (for many requests in flight)."""
        future = ReplyFuture()
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        self._outbox.put(RequestOp(subject, self._encode(message), future, timeout_s, self.max_bytes))
        return future

    async def publish_now(self, subject: str, data: bytes) -> None:
        """Publish from the bus thread itself (its callbacks), bypassing the outbox."""
        await self._nc.publish(subject, data)

    def subscribe(self, subject: str, target: Target, queue: str = "") -> Subscription:
        """Tell `target` a Delivery for every message on `subject` (one of a queue group if `queue`), at
        most `mailbox_limit` of them waiting in its mailbox (subscription.py)."""
        on_msg = mailbox_feeder(self, target, self.mailbox_limit)

        async def _sub() -> Any:
            sub = await self._nc.subscribe(
                subject, queue=queue, cb=on_msg, pending_bytes_limit=self.pending_bytes_limit
            )
            await self._nc.flush()  # the server knows the subscription once this returns
            return sub

        sub = Subscription(self.loop, subject, queue, self.call(_sub()))
        self._subscriptions.append(sub)
        return sub

    # ---- dead letters -----------------------------------------------------------------------
    def dead_letter(self, delivery: Delivery, reason: str, error_type: str, actor: str = "") -> None:
        """Send an unprocessable delivery to `mgrpo.<run>.dlq.<subject>`, count it, answer its requester
        (runtime/deadletter.py); never raises."""
        with self._counter_lock:
            self.dead_letters[delivery.subject] += 1
        send_dead_letter(self, delivery, reason, error_type, actor)

    @property
    def dead_letter_total(self) -> int:
        with self._counter_lock:
            return sum(self.dead_letters.values())
