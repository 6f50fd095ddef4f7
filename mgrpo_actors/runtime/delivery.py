"""What the bus puts into an actor's mailbox."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["REPLY_PREFIXES", "Delivery", "KvUpdate", "Settler"]

# Where requesters wait for replies: nats-py's `new_inbox()` (as runtime/requests.py uses it), and the
# `_R_.` subjects nats-server puts in a request that crossed from another account through a service
# import (deploy/accounts.py; it maps them back to the requester's inbox). A node replies only to
# these: a peer that names a stream's or a service's subject as its reply subject would otherwise make
# the node write there (a NodeInfo into a trajectory stream, ping storms between nodes).
REPLY_PREFIXES = ("_INBOX.", "_R_.")


class Settler(Protocol):
    """What settles a stream delivery (runtime/consumer.py's Consumer)."""

    def owns(self, delivery: Delivery) -> bool: ...

    def settle(self, delivery: Delivery, how: str, delay_s: float | None = None, wait: bool = False) -> None: ...


@dataclass
class Delivery:
    """One message off a subject or a JetStream consumer, still undecoded.

    Decoding happens in the actor's thread (so a bad message fails there and is dead-lettered,
    and the bus thread only moves bytes).
    """

    subject: str
    data: bytes
    reply: str = ""
    headers: dict[str, str] | None = None
    js_msg: Any = None  # nats.aio.msg.Msg of a JetStream consumer; None for core NATS
    consumer: Settler | None = None
    num_delivered: int = 1  # JetStream delivery attempt (1 = first)
    # core NATS: frees the subscription's mailbox slot once the actor took it (taken())
    on_taken: Callable[[], None] | None = None

    @property
    def from_stream(self) -> bool:
        return self.js_msg is not None

    def taken(self) -> None:
        """The actor took this delivery off its mailbox (handled, held or dead-lettered): its slot is free."""
        release, self.on_taken = self.on_taken, None
        if release is not None:
            release()

    def ack(self) -> None:
        """Acknowledge a JetStream message (no-op for core NATS)."""
        if self.consumer is not None:
            self.consumer.settle(self, "ack")

    def ack_sync(self) -> None:
        """Acknowledge and wait until the server confirmed it (a learner, after applying a batch)."""
        if self.consumer is not None:
            self.consumer.settle(self, "ack", wait=True)

    @property
    def handed_back(self) -> bool:
        """A stream message its consumer already gave back (nak'ed on stop): do not handle it."""
        return self.consumer is not None and not self.consumer.owns(self)

    def nak(self, delay_s: float | None = None) -> None:
        """Ask JetStream to redeliver (no-op for core NATS)."""
        if self.consumer is not None:
            self.consumer.settle(self, "nak", delay_s)

    def term(self) -> None:
        """Tell JetStream never to redeliver (after dead-lettering it)."""
        if self.consumer is not None:
            self.consumer.settle(self, "term")


@dataclass(frozen=True)
class KvUpdate:
    """A change to a watched key of a KV bucket."""

    bucket: str
    key: str
    value: bytes | None  # None when deleted or purged
    revision: int
    operation: str  # "PUT", "DEL" or "PURGE"
