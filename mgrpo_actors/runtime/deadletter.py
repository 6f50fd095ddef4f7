"""Dead letters (docs/architecture.md §Errors): a message that cannot be processed goes to
`mgrpo.<run>.dlq.<subject>` with the reason, its requester is told why, and the actor goes on."""

from __future__ import annotations

import time
from typing import Protocol

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.delivery import Delivery
from protocols import DeadLetter, Failure, Message, Subjects

__all__ = ["DeadLetterSink", "send_dead_letter"]


class DeadLetterSink(Protocol):
    """What sending a dead letter needs of the bus."""

    subjects: Subjects
    node: str
    max_bytes: int

    def publish(self, subject: str, message: Message) -> None: ...


log = get_logger(__name__)

# A dead letter keeps at most this much of the original payload (less if the size limit is smaller).
_DLQ_PAYLOAD_BYTES = 64 * 1024
# Room a dead letter needs besides the payload (envelope, subject, reason <= 4000 chars, names).
_DLQ_OVERHEAD_BYTES = 6 * 1024


def send_dead_letter(bus: DeadLetterSink, delivery: Delivery, reason: str, error_type: str, actor: str = "") -> None:
    """Publish the dead letter, answer the requester with a Failure, term the stream message.

    Never raises: a dead letter that cannot be sent is logged. A message that was itself on a
    dead-letter subject is only logged (no dlq.dlq.… loops).
    """
    reason = reason[:4000]
    try:
        if delivery.subject.startswith(bus.subjects.dlq(">")[:-1]):
            log.error("a dead letter could not be handled either", subject=delivery.subject, reason=reason)
        else:
            keep = max(0, min(_DLQ_PAYLOAD_BYTES, bus.max_bytes - _DLQ_OVERHEAD_BYTES))
            letter = DeadLetter(
                delivery.subject, reason, error_type, bytes(delivery.data[:keep]), bus.node, actor, time.time()
            )
            bus.publish(bus.subjects.dlq(delivery.subject), letter)
        if delivery.reply:
            bus.publish(delivery.reply, Failure(subject=delivery.subject, reason=reason, error_type=error_type))
    except Exception as exc:
        log.error("dead letter not sent", subject=delivery.subject, reason=reason, error=f"{type(exc).__name__}: {exc}")
    delivery.term()
