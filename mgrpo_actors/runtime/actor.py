"""`BusActor`: a pykka actor whose mailbox is fed by NATS subjects and JetStream consumers.

A subclass declares which message type each handler takes (`handlers()`), then calls `listen()`
or `consume()` in `on_start`. A handler that fails because the bus did (NATS unreachable for a moment,
a JetStream or KV call timed out) hands its delivery back to be retried: a stream message is nak'ed
with a delay, a request is answered with a retryable `Unavailable` Failure. An actor that dies anyway
(an error outside any handler) tells the bus (`Bus.on_actor_failed`), so its node can stop and exit
non-zero instead of running on without the role. Each delivery is decoded and handled in the actor's own thread, one
at a time. A handler's return value is the reply to a request; a handler that returns `HOLD` keeps
the delivery unsettled (it acks it later, once the work it stands for is safely handed on). A
delivery that fails to decode or whose handler raises goes to the dead-letter subject with the
reason; the actor keeps running. Messages that are not deliveries (an actor's notes to itself) go to
`on_note`.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import traceback
from collections.abc import Callable
from typing import Any, ClassVar

import nats.errors
import pykka

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.bus import Bus, Subscription
from mgrpo_actors.runtime.compute import single_threaded_here
from mgrpo_actors.runtime.consumer import Consumer
from mgrpo_actors.runtime.delivery import Delivery, KvUpdate
from mgrpo_actors.runtime.errors import BusError
from protocols import Failure, ProtocolError, decode

__all__ = ["HOLD", "UNAVAILABLE", "BusActor", "Handler", "is_transient"]

Handler = Callable[[Any, Delivery], Any]
_ids = itertools.count(1)
# A handler's return value meaning "I keep this delivery and settle it myself later".
HOLD = object()
# Failure.error_type of a request whose handler failed for a passing reason: the caller may retry.
UNAVAILABLE = "Unavailable"
# How long a stream message handed back after a passing failure waits before it is redelivered.
_RETRY_DELAY_S = 1.0


def is_transient(exc: BaseException) -> bool:
    """A failure of the bus, not of the message: worth handling again later."""
    return isinstance(exc, (BusError, TimeoutError, concurrent.futures.TimeoutError, nats.errors.Error))


class BusActor(pykka.ThreadingActor):
    """Base of every actor that talks on the bus."""

    role: ClassVar[str] = "actor"

    def __init__(self, bus: Bus, name: str | None = None) -> None:
        super().__init__()
        self.bus = bus
        self.name = name or f"{type(self).__name__}-{next(_ids)}"
        self.log = get_logger(type(self).__module__).bind(role=self.role, actor=self.name)
        self.handled = 0
        self.dead_letters = 0
        self.retried = 0  # deliveries handed back after a passing failure
        self._subscriptions: list[Subscription] = []
        self._consumers: list[Consumer] = []
        self._handlers: dict[type, Handler] = {}

    @classmethod
    def start_ready(cls, *args: Any, timeout_s: float = 30.0, **kwargs: Any) -> pykka.ActorRef:
        """`start()`, then wait until `on_start` has run, so its subscriptions are live on the server."""
        ref = cls.start(*args, **kwargs)
        ref.proxy().is_ready().get(timeout=timeout_s)
        return ref

    def is_ready(self) -> bool:
        """Answered after on_start (pykka runs it first), so callers can wait for the actor to be live."""
        return True

    # ---- to override ------------------------------------------------------------------------
    def handlers(self) -> dict[type, Handler]:
        """Message type -> bound method `(message, delivery) -> reply or None`."""
        return {}

    def on_kv_update(self, update: KvUpdate) -> None:
        """Called for watched KV keys (see KvBucket.watch)."""

    def on_note(self, note: Any) -> Any:
        """Called for anything told to the actor that is not a delivery (e.g. a note to itself)."""
        return super().on_receive(note)

    # ---- wiring (call from on_start) ----------------------------------------------------------
    def listen(self, subject: str, queue: str = "") -> Subscription:
        """Receive `subject` in this actor's mailbox (as one of queue group `queue` if given)."""
        sub = self.bus.subscribe(subject, self.actor_ref, queue=queue)
        self._subscriptions.append(sub)
        return sub

    def consume(self, stream: str, durable: str, subject: str | None = None, **kwargs: Any) -> Consumer:
        """Receive a durable JetStream consumer in this actor's mailbox; acked after the handler returns."""
        consumer = self.bus.consume(stream, durable, self.actor_ref, subject=subject, **kwargs)
        self._consumers.append(consumer)
        return consumer

    # ---- pykka hooks ------------------------------------------------------------------------
    def on_start(self) -> None:
        single_threaded_here()  # heavy torch work goes to the compute thread, if the process has one (compute.py)
        self._handlers = dict(self.handlers())

    def on_stop(self) -> None:
        self._release_intake()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        # pykka skips on_stop after a crash: stop intake here, or the dead actor keeps being fed.
        error = f"{exception_type.__name__}: {exception_value}"
        self.log.error("actor crashed", error=error)
        self._release_intake()
        if self.bus.on_actor_failed is not None:
            self.bus.on_actor_failed(self.name, error)

    def _release_intake(self) -> None:
        for sub in self._subscriptions:
            sub.stop()
        for consumer in self._consumers:
            consumer.stop()
        self._subscriptions, self._consumers = [], []

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Delivery):
            try:
                return self._on_delivery(message)
            finally:
                message.taken()  # its subscription may hand this actor the next one (bounded mailbox)
        if isinstance(message, KvUpdate):
            try:
                return self.on_kv_update(message)
            except Exception as exc:  # like a failing handler: logged and counted, the actor goes on
                self.dead_letters += 1
                self.log.error(
                    "kv update handler failed",
                    bucket=message.bucket,
                    key=message.key,
                    error=f"{type(exc).__name__}: {exc}",
                )
                return None
        return self.on_note(message)

    # ---- the one path every delivery takes ---------------------------------------------------
    def _on_delivery(self, delivery: Delivery) -> None:
        if delivery.handed_back:  # its consumer stopped and gave it back: another consumer handles it
            return
        try:
            message = decode(delivery.data, self.bus.max_bytes)
        except ProtocolError as exc:
            self._dead_letter(delivery, str(exc), "ProtocolError")
            return
        handler = self._handlers.get(type(message))
        if handler is None:
            known = ", ".join(sorted(t.__name__ for t in self._handlers)) or "none"
            self._dead_letter(
                delivery, f"{self.name} has no handler for {type(message).__name__} (handles: {known})", "NoHandler"
            )
            return
        try:
            reply = handler(message, delivery)
            if reply is HOLD:
                self.handled += 1
                return
            if reply is not None and delivery.reply:
                self.bus.publish(delivery.reply, reply)  # encodes here: a bad reply is this handler's failure
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            reason = f"{type(exc).__name__}: {exc} (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
            if is_transient(exc):
                self.hand_back(delivery, reason)
            else:
                self._dead_letter(delivery, reason, type(exc).__name__)
            return
        delivery.ack()
        self.handled += 1

    def hand_back(self, delivery: Delivery, reason: str) -> None:
        """Give a delivery back after a passing failure: redelivered later, or the requester may retry."""
        self.retried += 1
        self.log.warning("handed a message back after a passing failure", subject=delivery.subject, reason=reason)
        if delivery.from_stream:
            delivery.nak(delay_s=_RETRY_DELAY_S)
        elif delivery.reply:
            try:
                self.bus.publish(
                    delivery.reply, Failure(subject=delivery.subject, reason=reason, error_type=UNAVAILABLE)
                )
            except BusError:
                pass  # the requester times out and retries

    def _dead_letter(self, delivery: Delivery, reason: str, error_type: str) -> None:
        self.dead_letters += 1
        self.log.warning("dead-lettered a message", subject=delivery.subject, error_type=error_type, reason=reason)
        self.bus.dead_letter(delivery, reason, error_type, actor=self.name)
