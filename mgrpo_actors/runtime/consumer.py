"""A durable JetStream pull consumer feeding an actor's mailbox, with explicit ack and backpressure."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.audit import DeliveryLog
from mgrpo_actors.runtime.delivery import Delivery
from mgrpo_actors.runtime.jetstream import consumer_config, with_api_retries
from mgrpo_actors.runtime.loop import BusLoop, cancel_task
from mgrpo_actors.runtime.targets import Target, tell

__all__ = ["DURABLE_LOST_AFTER_S", "Consumer", "ensure_durable"]

log = get_logger(__name__)

# How long one pull request waits for messages; also the most a consumer's stop waits for it.
FETCH_WAIT_S = 1.0
# How long a pull for messages the server said are waiting may take (another process sharing the
# durable consumer may have taken them meanwhile: then it returns what it got after this).
BACKLOG_WAIT_S = 0.05
# A durable the server has answered "not found" for, on end, for this long is taken as deleted and the run stopped
# (runtime/consumer.py `_gone`): longer than a cluster's leader election, short beside a watchdog's minutes.
DURABLE_LOST_AFTER_S = 15.0
# A message redelivered this often is logged as suspicious (its handler may be killing its process).
_WARN_DELIVERIES = 3


@dataclass(eq=False)
class Consumer:
    """Messages are fetched only while fewer than `batch` are unsettled (backpressure). Every
    `progress_every_s` the consumer sends JetStream a progress ack for each message delivered and not
    yet settled, so work that waits in a busy actor's mailbox, or that an actor holds until it is
    handed on, is not redelivered while this process lives; if the process dies, its messages come
    back after ack_wait. Each delivery must be settled (ack, nak or term) through its Delivery.
    `stop()` stops fetching and naks whatever was delivered but not settled, so a restarted consumer
    gets it again at once; the actor skips deliveries its consumer has already handed back.
    """

    loop: BusLoop
    stream: str
    durable: str
    subject: str
    target: Target
    batch: int
    audit: DeliveryLog | None = None  # records every delivery when the process audits what it receives
    progress_every_s: float = 20.0  # progress acks for unsettled messages this often (a third of ack_wait)
    _task: asyncio.Task | None = None
    _inflight: dict[int, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _capacity: asyncio.Event | None = None
    delivered: int = 0
    settled: collections.Counter = field(default_factory=collections.Counter)
    _stopping: bool = False
    # Whether the server lost this durable (deleted, or its stream with it), asked after a failed fetch; and what
    # then stops the run, saying why (Bus.consume sets both): retrying for ever left the role deaf and the run hung.
    durable_gone: Callable[[], Awaitable[bool]] | None = None
    on_durable_gone: Callable[[str], None] | None = None
    clock: Callable[[], float] = time.monotonic  # what `_gone` measures DURABLE_LOST_AFTER_S by (tests inject one)
    _gone_since: float | None = None  # when the first of the "no such durable" answers in a row came

    def owns(self, delivery: Delivery) -> bool:
        """True while `delivery` is unsettled (False once acked, nak'ed or handed back on stop)."""
        with self._lock:
            return id(delivery) in self._inflight

    def settle(self, delivery: Delivery, how: str, delay_s: float | None = None, wait: bool = False) -> None:
        """ack / nak / term a delivery; `wait` blocks until the server confirmed an ack."""
        with self._lock:
            msg = self._inflight.pop(id(delivery), None)
            if msg is None:
                return
            self.settled[how] += 1
        if how == "ack":
            coro = msg.ack_sync() if wait else msg.ack()
        elif how == "nak":
            coro = msg.nak(delay=delay_s)
        else:
            coro = msg.term()
        if wait:
            self.loop.call(coro)
        else:
            self.loop.submit(coro)
        if self._capacity is not None:
            self.loop.call_soon(self._capacity.set)

    async def follow_server_ack_wait(self, psub: Any, ack_wait_s: float) -> None:
        """A durable that existed (made by `mgrpo deploy provision`, or by an earlier node) keeps its own ack
        wait; send progress acks by that one, and say so when it differs from this node's."""
        server_ack_wait = (await psub.consumer_info()).config.ack_wait
        if server_ack_wait and abs(server_ack_wait - ack_wait_s) > 0.01 * ack_wait_s:
            log.warning(
                "durable consumer has another ack wait than this node's pipeline.ack_wait_s; following the consumer's "
                "(provision with the run's config to match)",
                stream=self.stream,
                durable=self.durable,
                consumer_s=server_ack_wait,
                node_s=ack_wait_s,
            )
            self.progress_every_s = server_ack_wait / 3

    async def run(self, psub: Any) -> None:
        """The fetch loop (on the bus thread)."""
        self._capacity = asyncio.Event()
        last_progress = time.monotonic()
        backlog = 0  # messages the server said were waiting behind the last one fetched
        try:
            while not self._stopping:
                if time.monotonic() - last_progress >= self.progress_every_s:
                    last_progress = time.monotonic()
                    await self._keep_alive()
                room = self.batch - len(self._inflight)
                if room <= 0:
                    self._capacity.clear()
                    try:
                        await asyncio.wait_for(self._capacity.wait(), FETCH_WAIT_S)
                    except TimeoutError:
                        pass
                    continue
                try:
                    msgs = await _fetch(psub, room, backlog)
                    self._gone_since = None  # the durable answered: it exists
                except (TimeoutError, nats.errors.TimeoutError):
                    backlog, self._gone_since = 0, None
                    continue
                except Exception as exc:  # disconnected, consumer deleted, ...: keep trying, slowly
                    if await self._gone():
                        return
                    log.warning(
                        "consumer fetch failed; retrying", stream=self.stream, durable=self.durable, error=str(exc)
                    )
                    backlog = 0
                    await asyncio.sleep(1.0)
                    continue
                backlog = _pending_after(msgs[-1]) if msgs else 0
                for msg in msgs:
                    if self._stopping:  # fetched while stopping: hand it back at once
                        await msg.nak()
                        with self._lock:
                            self.settled["returned-unseen"] += 1
                        continue
                    self._deliver(msg)
        finally:
            # Close the pull subscription so the server sends nothing more to this dead inbox.
            try:
                await psub.unsubscribe()
            except Exception:
                pass

    async def _gone(self) -> bool:
        """True (and the run stopped) when the server says this durable no longer exists: nothing would ever reach
        its role again. Not recreated: a new durable would start over from the stream's first message, and the
        messages this one had delivered but not settled, here or in another process sharing it, are unknown.
        `--resume` makes it again from the stream (every consumer is idempotent under redelivery)."""
        if self.durable_gone is None:
            return False
        try:
            gone = await self.durable_gone()
        except Exception:  # the server cannot be asked either (disconnected): a passing failure
            gone = False
        now = self.clock()
        if not gone:
            self._gone_since = None
            return False
        if self._gone_since is None:
            self._gone_since = now
        # Only "no such durable" for DURABLE_LOST_AFTER_S on end: a cluster electing the consumer's or the stream's
        # new leader after a server died can answer "not found" for seconds (Raft election timeouts are 4-9 s).
        if now - self._gone_since < DURABLE_LOST_AFTER_S:
            return False
        why = f"durable consumer {self.durable!r} of stream {self.stream!r} no longer exists (deleted?)"
        log.error("durable consumer lost: stopping the run", stream=self.stream, durable=self.durable)
        if self.on_durable_gone is not None:
            self.on_durable_gone(why)
        return True

    async def _keep_alive(self) -> None:
        with self._lock:
            unsettled = list(self._inflight.values())
        for msg in unsettled:
            try:
                await msg.in_progress()
            except Exception as exc:  # disconnected: the message may be redelivered, which is safe
                log.warning("progress ack failed", stream=self.stream, error=str(exc))
                return

    def _deliver(self, msg: Any) -> None:
        if self.audit is not None:
            self.audit.record(msg.subject, msg.data, "stream")
        num_delivered = msg.metadata.num_delivered if msg.metadata else 1
        if num_delivered >= _WARN_DELIVERIES:
            log.warning(
                "message delivered again",
                stream=self.stream,
                durable=self.durable,
                subject=msg.subject,
                deliveries=num_delivered,
            )
        delivery = Delivery(
            msg.subject, msg.data, "", msg.headers, js_msg=msg, consumer=self, num_delivered=num_delivered
        )
        with self._lock:
            self._inflight[id(delivery)] = msg
            self.delivered += 1
        if not tell(self.target, delivery):
            self.settle(delivery, "nak")  # the actor is gone: give the message back now

    def stop_fetching(self) -> None:
        """Fetch no more; what was delivered stays in flight until settled or `stop()`.

        The fetch in progress is allowed to finish (at most FETCH_WAIT_S) rather than cancelled, so
        nothing it already received is lost between the server and the actor.
        """
        if self._task is None:
            return
        task, self._task = self._task, None
        self._stopping = True
        if not self.loop.running:
            return
        try:
            self.loop.call(asyncio.wait_for(asyncio.shield(task), FETCH_WAIT_S + 2))
        except Exception:
            self.loop.call(cancel_task(task))

    def stop(self) -> None:
        """Stop fetching; nak what was delivered and not yet settled."""
        self.stop_fetching()
        with self._lock:
            pending, self._inflight = list(self._inflight.values()), {}
            self.settled["nak-on-stop"] += len(pending)
        if self.loop.running:
            for msg in pending:
                try:
                    self.loop.call(msg.nak(), timeout=5)
                except Exception as exc:  # disconnected: JetStream redelivers after ack_wait anyway
                    log.warning("nak on stop failed", stream=self.stream, error=str(exc))


async def _fetch(psub: Any, room: int, backlog: int) -> list[Any]:
    """The next messages, as soon as there are any.

    Not nats-py's `fetch(room)`: with room > 1 it may leave a lingering pull request open on the server
    (it does so whenever the first answer it reads is a status, e.g. the late 408 of the previous,
    expired pull) and then hold the first message that arrives until `room` have arrived or a request
    expires. Messages sent to a waiting consumer (a step's second rollout request, a learner's
    StepDone) were handed on up to FETCH_WAIT_S late: `mgrpo bench steps` measured 0.2-0.95 s stalls
    in 3 of 12 one-second steps. So: wait for one message (`fetch(1)` returns the moment it arrives),
    and take several at once only when the server has said that that many are waiting (`backlog`,
    from the last message's metadata), which a pull gets at once (within BACKLOG_WAIT_S if another
    process sharing the durable took some meanwhile).
    """
    if backlog > 0 and room > 1:
        return await psub.fetch(min(room, backlog), timeout=BACKLOG_WAIT_S)
    return await psub.fetch(1, timeout=FETCH_WAIT_S)


def _pending_after(msg: Any) -> int:
    """How many messages the server had waiting for this consumer after `msg` (0 if it did not say)."""
    try:
        return int(msg.metadata.num_pending or 0)
    except Exception:  # not a JetStream message (no ack subject to read it from)
        return 0


def ensure_durable(
    bus: Any,
    stream: str,
    durable: str,
    subject: str | None,
    ack_wait_s: float,
    max_ack_pending: int,
    max_deliver: int = -1,
) -> bool:
    """Make the durable pull consumer `durable` on `stream` with the settings `Bus.consume` would give
    it (`mgrpo deploy provision`, before any node binds to it); False when it exists already (its
    settings are kept, as `Bus.consume` keeps them)."""
    config = consumer_config(durable, ack_wait_s, max_ack_pending, max_deliver)
    # what nats-py's pull_subscribe sets when it creates one
    config.name, config.filter_subject = (durable, subject or ">")

    async def make() -> bool:
        try:
            await with_api_retries(
                lambda: bus._js.consumer_info(stream, durable), f"consumer info {stream}/{durable}", bus._api_denials
            )
            return False
        except nats.js.errors.NotFoundError:
            await with_api_retries(
                lambda: bus._js.add_consumer(stream, config=config),
                f"create consumer {stream}/{durable}",
                bus._api_denials,
            )
            return True

    return bool(bus.call(make(), timeout=300))
