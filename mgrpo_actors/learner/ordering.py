"""The learner's bookkeeping around its optimizer steps (docs/architecture.md §One training step, step 6;
§Delivery and state): chunks gathered per batch id until their batch is whole, whole batches applied in step
order with no gap, the version a step already applied made (to report it again), what a restarted learner
resumes from, and when applied batches are acked (`learners.<side>.checkpoint_every`). Plain data: the learner
actor (actors/learner.py) keeps the trainer, the weights, KV and the acks themselves.

Applied record (KV `learner.<side>`, and in each checkpoint): {"step": the last step applied, "batch_id": its
batch, "version": the policy version it made, "applied": how many batches were applied, "history": the last
HISTORY batch ids applied, in order} (records before kept every batch id, and no "applied": a record that grew
by an id a step, for ever).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from protocols import AlignedBatch

__all__ = [
    "HISTORY",
    "AckSchedule",
    "Arrival",
    "BatchAssembler",
    "applied_count",
    "next_record",
    "resumed_record",
    "step_version",
]

HISTORY = 64  # batch ids the applied record keeps, for whoever reads it (the newest steps')

D = TypeVar("D")  # what a chunk came with (the bus's Delivery), handed back untouched


class Arrival(enum.Enum):
    """What a chunk is to the learner."""

    APPLIED_BEFORE = "applied before"  # its step is applied (a redelivery after a restart): never apply twice
    DUPLICATE = "duplicate"  # the same chunk again
    HELD = "held"  # held; its batch still lacks chunks
    COMPLETE = "complete"  # held, and its batch now has all its chunks


class BatchAssembler(Generic[D]):
    """Chunks by batch id until each batch has all of them; whole batches by step until it is their turn."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[tuple[AlignedBatch, D]]] = {}
        self.complete: dict[int, str] = {}  # step → batch id of a batch with all its chunks, not applied yet

    def add(self, chunk: AlignedBatch, delivery: D, applied_step: int) -> Arrival:
        """Take one chunk, given the last step applied."""
        if chunk.step <= applied_step:
            return Arrival.APPLIED_BEFORE
        held = self.chunks.setdefault(chunk.batch_id, [])
        if any(c.chunk == chunk.chunk for c, _ in held):
            return Arrival.DUPLICATE
        held.append((chunk, delivery))
        if len(held) < chunk.num_chunks:
            return Arrival.HELD
        self.complete[chunk.step] = chunk.batch_id
        return Arrival.COMPLETE

    def next_due(self, applied_step: int) -> tuple[str, list[tuple[AlignedBatch, D]]] | None:
        """The whole batch of the step after `applied_step` (no longer held here), or None while it is not whole:
        async mode can finish step n+1's batch first, and it waits, so applied batch ids run 0, 1, 2, … with no
        gap. A batch that then fails to apply is handed back by the caller and comes again chunk by chunk."""
        batch_id = self.complete.pop(applied_step + 1, None)
        if batch_id is None:
            return None
        return batch_id, self.chunks.pop(batch_id)

    def waiting(self) -> list[int]:
        """The steps whose whole batches wait for an earlier step."""
        return sorted(self.complete)


def step_version(applied: dict[str, Any], step: int) -> int:
    """The version step `step` (applied before) made: steps are applied in order, one version each, so it is
    the applied record's version less the steps applied since."""
    return applied["version"] - (applied["step"] - step)


def applied_count(applied: dict[str, Any]) -> int:
    """How many batches the record says were applied (a record of before counted them by its whole history)."""
    return int(applied.get("applied", len(applied["history"])))


def next_record(applied: dict[str, Any], step: int, batch_id: str, version: int) -> dict[str, Any]:
    """The applied record once `batch_id` of `step` is applied as `version`."""
    return {
        "step": step,
        "batch_id": batch_id,
        "version": version,
        "applied": applied_count(applied) + 1,
        "history": [*applied["history"], batch_id][-HISTORY:],
    }


def resumed_record(saved: dict[str, Any] | None, announced: tuple[int, int] | None) -> dict[str, Any]:
    """The applied record a learner without a checkpoint resumes from: its KV record (`saved`) and the
    (step, version) its side last announced. A newer announcement than the record was applied: the learner
    announced, then died before recording."""
    applied: dict[str, Any] = {"step": -1, "batch_id": "", "version": 0, "history": []}
    if saved is not None:
        applied = {"history": [], **saved}
    if announced is not None and announced[1] > applied["version"]:
        applied = {**applied, "step": announced[0], "batch_id": "", "version": announced[1]}
    return applied


class AckSchedule(Generic[D]):
    """Applied batches are acked once their step is safe: at once without checkpoints (`every` 0, the KV
    record is enough), else only with the checkpoint after every `every`-th applied batch (a learner killed
    before it gets the batches again and, restarted from its checkpoint, applies them then)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.unacked: list[D] = []  # applied, waiting for the next checkpoint

    def hold(self, deliveries: Iterable[D]) -> None:
        """An applied batch's deliveries, to ack when `due`."""
        self.unacked += list(deliveries)

    def due(self, applied_batches: int) -> bool:
        """Whether the held deliveries are acked now, `applied_batches` batches applied in all (a checkpoint
        first when `every` is not 0)."""
        return self.every == 0 or applied_batches % self.every == 0

    def release(self) -> list[D]:
        """The deliveries to ack now (none held after)."""
        released, self.unacked = self.unacked, []
        return released
