"""`BusActor`: a pykka actor whose mailbox is fed by NATS subjects and JetStream consumers.

A subclass declares which message type each handler takes (`handlers()`), then calls `listen()`
or `consume()` in `on_start`. Each delivery is decoded and handled in the actor's own thread, one
at a time. A handler's return value is the reply to a request; a handler that returns `HOLD` keeps
the delivery unsettled (it acks it later, once the work it stands for is safely handed on). A
delivery that fails to decode or whose handler raises goes to the dead-letter subject with the
reason; the actor keeps running. Messages that are not deliveries (an actor's notes to itself) go to
`on_note`.
"""

from __future__ import annotations

import itertools
import traceback
from typing import Any, Callable, ClassVar

import pykka

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.bus import Bus, Subscription
from mgrpo_actors.runtime.consumer import Consumer
from mgrpo_actors.runtime.delivery import Delivery, KvUpdate
from protocols import Message, ProtocolError, decode

__all__ = ["HOLD", "BusActor", "Handler"]

Handler = Callable[[Any, Delivery], Any]
_ids = itertools.count(1)
# A handler's return value meaning "I keep this delivery and settle it myself later".
HOLD = object()


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
        self._handlers = dict(self.handlers())

    def on_stop(self) -> None:
        self._release_intake()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        # pykka skips on_stop after a crash: stop intake here, or the dead actor keeps being fed.
        self.log.error("actor crashed", error=f"{exception_type.__name__}: {exception_value}")
        self._release_intake()

    def _release_intake(self) -> None:
        for sub in self._subscriptions:
            sub.stop()
        for consumer in self._consumers:
            consumer.stop()
        self._subscriptions, self._consumers = [], []

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Delivery):
            return self._on_delivery(message)
        if isinstance(message, KvUpdate):
            try:
                return self.on_kv_update(message)
            except Exception as exc:  # like a failing handler: logged and counted, the actor goes on
                self.dead_letters += 1
                self.log.error("kv update handler failed", bucket=message.bucket, key=message.key, error=f"{type(exc).__name__}: {exc}")
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
            self._dead_letter(delivery, f"{self.name} has no handler for {type(message).__name__} (handles: {known})", "NoHandler")
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
            self._dead_letter(delivery, reason, type(exc).__name__)
            return
        delivery.ack()
        self.handled += 1

    def _dead_letter(self, delivery: Delivery, reason: str, error_type: str) -> None:
        self.dead_letters += 1
        self.log.warning("dead-lettered a message", subject=delivery.subject, error_type=error_type, reason=reason)
        self.bus.dead_letter(delivery, reason, error_type, actor=self.name)
