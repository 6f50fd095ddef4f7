"""The ablation's queue (alignment/fifo_queue.py) in the sub aligner's KV state (`state-sub`), so that a restarted
aligner goes on with the samples it had queued (docs/method.md §Training schedule, the unaligned condition;
docs/architecture.md §Delivery and state).

Keys: `fifo.sub.<step>.<i>`, chunk i of the queue that step <step>'s batch left (an AlignedBatch of its rows, cut
as a batch is to fit `nats.max_message_bytes`), and `fifo.sub.head`, which names that queue and the one the step
took its batch from. A step's queue and head are written after its batch and before its published record
(`aligned.sub.recent`), and the record is what commits the step. So a restarted aligner takes the head's queue if
that step is recorded as published, and otherwise the queue the step was taken from: the step is then built again
from the same queue, as a re-run after a crash must be. The queue of the step before is deleted once the next
one is committed, so KV holds at most two queues (a second copy of up to one step's worth of sub samples).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from mgrpo_actors.alignment.batch_rows import batch_to_rows, join_chunks, rows_to_batch, split_batch
from mgrpo_actors.alignment.fifo_queue import FifoQueue
from mgrpo_actors.log import get_logger
from protocols import DEFAULT_SUB_TYPE, AlignedBatch, decode, encode

__all__ = ["HEAD_KEY", "QueueStore", "SavedQueue", "chunk_key", "head_key"]

log = get_logger(__name__)


def head_key(side: str = DEFAULT_SUB_TYPE) -> str:
    """The key naming a sub-agent type's queue (in its side's state bucket)."""
    return f"fifo.{side}.head"


HEAD_KEY = head_key()  # the default type's


def chunk_key(step: int, chunk: int, side: str = DEFAULT_SUB_TYPE) -> str:
    return f"fifo.{side}.{step}.{chunk}"


class Kv(Protocol):
    """What the store needs of a KV bucket (runtime/kv.py KvBucket)."""

    def get(self, key: str) -> bytes | None: ...
    def put(self, key: str, value: bytes) -> Any: ...
    def delete(self, key: str) -> None: ...


@dataclass(frozen=True)
class SavedQueue:
    """Where a queue lies in KV: the step that left it and how many chunks it took (0: empty)."""

    step: int
    chunks: int


@dataclass
class QueueStore:
    """The queue the next step takes from, where it is saved (None: the empty start), and the queues saved by
    steps whose record is not yet written."""

    kv: Kv
    max_bytes: int
    side: str = DEFAULT_SUB_TYPE  # the sub-agent type whose queue this is
    queue: FifoQueue = field(default_factory=FifoQueue)
    saved: SavedQueue | None = None
    pending: dict[int, SavedQueue] = field(default_factory=dict)

    def restore(self, published: Callable[[int], bool]) -> None:
        """The queue KV holds for the next step (nothing saved: the empty start). Raises LookupError if the
        head names a chunk that is gone."""
        raw = self.kv.get(head_key(self.side))
        if raw is None:
            return
        head = json.loads(raw)
        committed = published(head["left"]["step"])
        chosen = head["left"] if committed else head["taken_from"]
        if committed and head["taken_from"] is not None:  # a crash before advance() left it behind
            self._delete(SavedQueue(**head["taken_from"]))
        if chosen is not None:
            saved = SavedQueue(**chosen)
            self.queue, self.saved = self._read(saved), saved

    def save(self, left: FifoQueue, run_id: str) -> None:
        """Store the queue a step's batch left (before the step's record), and the head naming it."""
        assert left.step is not None, "a queue to save is left by a step"
        rows = list(left.rows)
        queue_id = f"{run_id}-{self.side}-queue{left.step}"
        batch = rows_to_batch(run_id, self.side, left.step, queue_id, rows) if rows else None
        chunks = split_batch(batch, self.max_bytes) if batch is not None else []
        for i, chunk in enumerate(chunks):
            self.kv.put(chunk_key(left.step, i, self.side), encode(chunk, self.max_bytes))
        saved = SavedQueue(left.step, len(chunks))
        taken_from = asdict(self.saved) if self.saved is not None else None
        self.kv.put(head_key(self.side), json.dumps({"left": asdict(saved), "taken_from": taken_from}).encode())
        self.pending[left.step] = saved

    def advance(self, left: FifoQueue) -> None:
        """The step that left `left` is committed: `left` is the queue now, the one it was taken from goes."""
        assert left.step is not None and left.step in self.pending, "advance only to a saved queue"
        # The queue moves on first: a failing delete must not leave the queue already taken from in place (the next
        # step would train its samples again); what it leaves in KV, restore() clears.
        old, (self.queue, self.saved) = self.saved, (left, self.pending.pop(left.step))
        if old is not None:
            try:
                self._delete(old)
            except Exception as exc:  # noqa: BLE001 - best effort: a stale key costs space, not correctness
                log.warning("the ablation queue's old chunks were not deleted", step=old.step, error=str(exc))

    def _delete(self, saved: SavedQueue) -> None:
        for i in range(saved.chunks):
            self.kv.delete(chunk_key(saved.step, i, self.side))

    def _read(self, saved: SavedQueue) -> FifoQueue:
        chunks = []
        for i in range(saved.chunks):
            raw = self.kv.get(chunk_key(saved.step, i, self.side))
            if raw is None:
                raise LookupError(f"KV {chunk_key(saved.step, i, self.side)} (chunk {i} of {saved.chunks}) is gone")
            chunk = decode(raw, self.max_bytes)
            if not isinstance(chunk, AlignedBatch):
                raise LookupError(f"KV {chunk_key(saved.step, i, self.side)} holds a {type(chunk).__name__}")
            chunks.append(chunk)
        rows = batch_to_rows(join_chunks(chunks)) if chunks else []
        return FifoQueue(tuple(rows), saved.step)
