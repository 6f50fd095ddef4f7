"""Request/reply bookkeeping on the bus thread: one wildcard inbox subscription for every reply.

Each request gets a token; its reply subject is `<inbox>.<token>`. A reply completes the caller's
`ReplyFuture` directly (no Task or `asyncio.wait_for` per request); a timer per request fails it with
RequestTimeout. The reply is decoded in the thread that reads the future, never on the bus thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mgrpo_actors.runtime.audit import DeliveryLog
from mgrpo_actors.runtime.errors import BusError, NoResponders, RemoteFailure, RequestTimeout
from protocols import Failure, Message, decode

__all__ = ["PendingRequest", "RawReply", "ReplyFuture", "ReplyRouter", "RequestOp"]


@dataclass(frozen=True)
class RawReply:
    """A reply's bytes, decoded when the caller reads the future."""

    data: bytes
    subject: str  # the request's subject, for error messages
    max_bytes: int


class ReplyFuture(concurrent.futures.Future):
    """A Future of a request's reply, decoded in the thread that asks for the result (not the bus thread)."""

    def result(self, timeout: float | None = None) -> Message:  # type: ignore[override]
        raw = super().result(timeout)
        reply = decode(raw.data, raw.max_bytes)
        if isinstance(reply, Failure):
            raise RemoteFailure(raw.subject, reply.error_type, reply.reason)
        return reply


@dataclass(frozen=True)
class RequestOp:
    """A request to send; its decoded reply completes `future`."""

    subject: str
    data: bytes
    future: ReplyFuture
    timeout_s: float
    max_bytes: int  # decode limit of the reply


@dataclass
class PendingRequest:
    """A request sent and not answered yet."""

    op: RequestOp
    timer: asyncio.TimerHandle
    retried_no_responders: bool = False


class ReplyRouter:
    """Sends requests and routes their replies back to the callers' futures (bus thread only)."""

    def __init__(self, audit: DeliveryLog | None = None) -> None:
        self._audit = audit
        self._nc: Any = None
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._pending: dict[str, PendingRequest] = {}

    async def open(self, nc: Any) -> None:
        """Subscribe to the connection's reply inbox."""
        self._nc = nc
        self._prefix = nc.new_inbox()
        await nc.subscribe(f"{self._prefix}.*", cb=self._on_reply)

    async def send(self, op: RequestOp) -> None:
        token = str(next(self._tokens))
        loop = asyncio.get_running_loop()
        self._pending[token] = PendingRequest(op, loop.call_later(op.timeout_s, self._expire, token))
        await self._publish(token)

    async def _publish(self, token: str) -> None:
        pending = self._pending.get(token)
        if pending is None:  # expired meanwhile
            return
        try:
            await self._nc.publish(pending.op.subject, pending.op.data, reply=f"{self._prefix}.{token}")
        except Exception as exc:
            self._complete(token, BusError(f"request on {pending.op.subject} not sent: {type(exc).__name__}: {exc}"))

    async def _on_reply(self, msg: Any) -> None:
        token = msg.subject.rsplit(".", 1)[-1]
        pending = self._pending.get(token)
        if pending is None:  # the request timed out already
            return
        if self._audit is not None and msg.data:
            self._audit.record(msg.subject, msg.data, "reply")
        if msg.headers and msg.headers.get("Status") == "503":
            if not pending.retried_no_responders:
                # One retry after a round trip: nats-server can answer "no responders" to a connection's
                # first publish after another connection subscribed, even once that one flushed.
                pending.retried_no_responders = True
                asyncio.get_running_loop().create_task(self._retry(token))
                return
            self._complete(token, NoResponders(pending.op.subject))
            return
        self._complete(token, RawReply(msg.data, pending.op.subject, pending.op.max_bytes))

    async def _retry(self, token: str) -> None:
        try:
            await self._nc.flush(timeout=1)
        except Exception:
            pass
        await self._publish(token)

    def _complete(self, token: str, outcome: RawReply | BaseException) -> None:
        pending = self._pending.pop(token, None)
        if pending is None:
            return
        pending.timer.cancel()
        future = pending.op.future
        if future.done():  # cancelled by the caller
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def _expire(self, token: str) -> None:
        pending = self._pending.get(token)
        if pending is not None:
            self._complete(token, RequestTimeout(pending.op.subject, pending.op.timeout_s))

    def fail_all(self, error: Callable[[str], BaseException]) -> None:
        """Fail every request still waiting; `error(subject)` makes the exception."""
        for token in list(self._pending):
            self._complete(token, error(self._pending[token].op.subject))
