"""Reading a stream without a consumer: batched direct gets by sequence, from the stream's first message
(or from now on), then following it live by asking again every `poll_s`. What the monitor, `mgrpo tap
--stream` and the tests' stream reads use.

Why not an ordered consumer (what this replaced): nats-server does not check a consumer's delivery
subject against its creator's permissions, so a user allowed to create consumers on a stream can have
the server deliver that stream's messages onto any subject of its account; readers that only read
get no consumer rights at all (deploy/access.py). A direct get is a request: its answers come only to
the reader's own inbox.

A batched direct get (`{"seq", "next_by_subj", "batch", "max_bytes"}` on `$JS.API.DIRECT.GET.<stream>`,
nats-server 2.11+) answers with up to `batch` messages and then an end-of-batch status; it needs the
stream's `allow_direct` (every stream of a run has it: runtime/jetstream.py). A stream made without it
(a run started before) is read one message at a time through `$JS.API.STREAM.MSG.GET`, which works
on any stream, only slower (measured: 10,000 messages in 3.2 s, against 0.41 s in batches of 500).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats.js.errors

from mgrpo_actors.log import get_logger

__all__ = ["StoredMessage", "StreamFollower", "follow_stream"]

log = get_logger(__name__)

BATCH = 500  # messages per direct get
# and at most this many bytes (a batch stream's messages are large; the server sends at least one)
BATCH_BYTES = 8 * 1024 * 1024
REQUEST_TIMEOUT_S = 5.0
RETRY_S = 1.0  # after a failed read
RESET_CHECK_EVERY = 20  # empty polls between checks that the stream was not recreated (sequences from 1 again)


class ReadFailed(Exception):
    """The server answered a read with an error status (503: the stream is gone or has no leader, …)."""


@dataclass(frozen=True)
class StoredMessage:
    """One message as the stream stored it."""

    subject: str
    data: bytes
    seq: int  # its stream sequence
    pending: int  # messages after it in the stream on the subject read (when it was read; -1 if unknown)


class StreamFollower:
    """Hands every message of `stream` (on `subject`) to `cb`, in stream order, then follows the stream.
    `unsubscribe()` stops it (the same call ends a nats-py subscription, so callers treat both alike)."""

    def __init__(
        self,
        nc: Any,
        stream: str,
        subject: str | None,
        cb: Callable[[StoredMessage], Awaitable[None]],
        poll_s: float = 0.25,
    ) -> None:
        self.nc, self.stream, self.subject, self.cb, self.poll_s = nc, stream, subject or ">", cb, poll_s
        self.next_seq = 1
        self.direct = True
        self._task: asyncio.Task | None = None
        self._empty_polls = 0

    async def start(self, from_start: bool) -> StreamFollower:
        info = await self.nc.jetstream().stream_info(self.stream)
        self.direct = bool(info.config.allow_direct)
        self.next_seq = 1 if from_start else info.state.last_seq + 1
        self._task = asyncio.get_running_loop().create_task(self._follow())
        self._task.add_done_callback(self._ended)
        return self

    def _ended(self, task: asyncio.Task) -> None:
        # _follow catches everything it can: say so if it did not
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "stream reader stopped",
                stream=self.stream,
                error=f"{type(task.exception()).__name__}: {task.exception()}",
            )

    async def unsubscribe(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    async def _follow(self) -> None:
        while True:
            try:
                messages = await (self._direct_batch() if self.direct else self._one())
                if not messages:
                    await self._check_reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # disconnected, reconnecting, the stream gone or leaderless: keep trying, slowly
                log.warning(
                    "stream read failed; trying again",
                    stream=self.stream,
                    next_seq=self.next_seq,
                    error=f"{type(exc).__name__}: {exc}",
                )
                await asyncio.sleep(RETRY_S)
                continue
            for message in messages:
                self.next_seq = message.seq + 1
                try:
                    await self.cb(message)
                except Exception as exc:  # one message the reader's owner could not take: the next ones still come
                    log.warning(
                        "stream message not handled",
                        stream=self.stream,
                        seq=message.seq,
                        error=f"{type(exc).__name__}: {exc}",
                    )
            if not messages:
                await asyncio.sleep(self.poll_s)  # caught up: wait for more

    async def _check_reset(self) -> None:
        """Every RESET_CHECK_EVERY empty polls: a stream recreated meanwhile numbers from 1 again; read it from its
        start."""
        self._empty_polls += 1
        if self._empty_polls % RESET_CHECK_EVERY:
            return
        state = (await self.nc.jetstream().stream_info(self.stream)).state
        if state.last_seq < self.next_seq - 1:
            log.warning(
                "stream was recreated; reading it from its start",
                stream=self.stream,
                last_seq=state.last_seq,
                next_seq=self.next_seq,
            )
            self.next_seq = state.first_seq or 1

    async def _direct_batch(self) -> list[StoredMessage]:
        """The next batch after next_seq ([] when there is none yet)."""
        inbox = self.nc.new_inbox()
        answers: asyncio.Queue = asyncio.Queue()

        async def collect(msg: Any) -> None:
            await answers.put(msg)

        sub = await self.nc.subscribe(inbox, cb=collect)
        try:
            request = {"seq": self.next_seq, "next_by_subj": self.subject, "batch": BATCH, "max_bytes": BATCH_BYTES}
            await self.nc.publish(f"$JS.API.DIRECT.GET.{self.stream}", json.dumps(request).encode(), reply=inbox)
            found: list[StoredMessage] = []
            while True:
                msg = await asyncio.wait_for(answers.get(), REQUEST_TIMEOUT_S)
                headers = msg.headers or {}
                status = headers.get("Status")
                if status in ("204", "404"):  # 204: end of this batch; 404: nothing at or after next_seq yet
                    return found
                if status:
                    raise ReadFailed(
                        f"direct get on {self.stream}: status {status} {headers.get('Description', '')}".strip()
                    )
                found.append(
                    StoredMessage(
                        headers.get("Nats-Subject", ""),
                        msg.data,
                        int(headers["Nats-Sequence"]),
                        int(headers.get("Nats-Num-Pending", -1)),
                    )
                )
        finally:
            await sub.unsubscribe()

    async def _one(self) -> list[StoredMessage]:
        try:
            raw = await self.nc.jetstream()._jsm.get_msg(
                self.stream, seq=self.next_seq, subject=self.subject, next=True
            )
        except nats.js.errors.NotFoundError:
            return []
        return [StoredMessage(raw.subject or "", raw.data or b"", int(raw.seq or self.next_seq), -1)]


async def follow_stream(
    nc: Any,
    stream: str,
    subject: str | None,
    cb: Callable[[StoredMessage], Awaitable[None]],
    from_start: bool = True,
    poll_s: float = 0.25,
) -> StreamFollower:
    """Start a StreamFollower of `stream` on connection `nc` (NotFoundError if the stream is missing)."""
    return await StreamFollower(nc, stream, subject, cb, poll_s).start(from_start)
