"""What an aligner holds of its steps until their batches are out (docs/architecture.md §One training step, step
5; §Delivery and state: "a sample is acked only after it is safely handed on"): per step the plan, the pieces
(first copy of each, repeats counted), and the deliveries to ack once the batch is published; which steps
timed out or need their publish retried; and what was published, per step. Plain data: the aligner actors
(actors/aligner.py and its two sides) consume, publish, ack and write KV around it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocols import AlignedBatch, StepPlan

__all__ = ["HeldStep", "StepHolding", "batch_figures", "batch_record"]


@dataclass
class HeldStep:
    """What an aligner holds of one step until its batch is published."""

    step: int
    plan: StepPlan | None = None
    plan_seen_at: float = 0.0  # time.monotonic() when the plan arrived
    deliveries: list[Any] = field(default_factory=list)  # the bus's Delivery of every piece, acked once published
    pieces: dict[str, dict] = field(default_factory=dict)  # subclass-defined collections by name
    counts: dict[str, int] = field(default_factory=dict)  # duplicates, superseded, … for the metrics
    publish_failures: int = 0  # failed attempts at publishing the step's batch (retried each tick)
    figures_sent: bool = False  # the batch's metrics and event went out (a retried publish sends them once)
    result: Any = None  # what build() leaves for after_publish()
    # Pieces that came before the plan, checked against it when it comes: (collection, key, message, delivery).
    waiting: list[tuple[str, Any, Any, Any]] = field(default_factory=list)
    # The delivery of each kept piece, by (collection, key): a piece refused after it was kept is dead-lettered.
    kept_deliveries: dict[tuple[str, Any], Any] = field(default_factory=dict)
    # Repeats of a kept key from another attempt, in arrival order: one takes the place of a kept piece refused later.
    alternates: dict[tuple[str, Any], list[tuple[Any, Any]]] = field(default_factory=dict)

    def collection(self, name: str) -> dict:
        return self.pieces.setdefault(name, {})

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def keep_first(self, collection: str, key: Any, message: Any, delivery: Any = None) -> None:
        """Keep the first message per key; count a repeat as redelivered (the same piece again) or as
        superseded (another attempt at the same rollout, whose first complete one counts). A repeat that is not
        the same piece (another attempt, or one that claims another query or rollout) stays an alternate, in case
        the kept one is refused (`drop_kept`)."""
        received = self.collection(collection)
        if key not in received:
            received[key] = message
            self.kept_deliveries[(collection, key)] = delivery
            return
        kept = received[key]
        self.count("redelivered" if kept.attempt == message.attempt else "superseded")
        if _identity(kept) != _identity(message):
            self.alternates.setdefault((collection, key), []).append((message, delivery))

    def drop_kept(self, collection: str, key: Any) -> Any:
        """Forget the kept piece at `key` (it was refused): its delivery, to dead-letter. The first alternate from
        another attempt, if any, is kept in its place."""
        del self.collection(collection)[key]
        delivery = self.kept_deliveries.pop((collection, key), None)
        if delivery is not None:
            self.forget_delivery(delivery)
        if alternates := self.alternates.get((collection, key)):
            message, alternate = alternates.pop(0)
            self.collection(collection)[key] = message
            self.kept_deliveries[(collection, key)] = alternate
        return delivery

    def drop_alternate(self, collection: str, key: Any, message: Any) -> Any:
        """Forget `message`, an alternate at `key` (it was refused): its delivery, to dead-letter."""
        alternates = self.alternates.get((collection, key), [])
        for i, (alternate, delivery) in enumerate(alternates):
            if alternate is message:
                del alternates[i]
                if delivery is not None:
                    self.forget_delivery(delivery)
                return delivery
        raise KeyError(f"no such alternate at {key!r}")

    def forget_delivery(self, delivery: Any) -> None:
        """Stop holding `delivery` (it is dead-lettered instead of acked with the step)."""
        self.deliveries = [d for d in self.deliveries if d is not delivery]


@dataclass
class StepHolding:
    """One aligner's held steps and published records. `saved(step)` reads the record a step's publish left
    (KV, alignment/records.py; raw JSON or None): a restarted aligner learns from it what is already out."""

    saved: Callable[[int], bytes | None]
    steps: dict[int, HeldStep] = field(default_factory=dict)
    published: dict[int, dict[str, Any]] = field(default_factory=dict)
    late: int = 0  # pieces that arrived after their step's batch was out (acked, not used)

    def published_record(self, step: int) -> dict[str, Any] | None:
        """What was published for `step` ({batch_id, num_samples, num_chunks}), None if nothing yet."""
        if step not in self.published:
            raw = self.saved(step)
            if raw is None:
                return None
            self.published[step] = json.loads(raw)
        return self.published[step]

    def hold(self, step: int, delivery: Any) -> HeldStep | None:
        """The step to add a piece to (the delivery is now held), or None if its batch is out (counted late)."""
        if self.published_record(step) is not None:
            self.late += 1
            return None
        held = self.steps.setdefault(step, HeldStep(step))
        held.deliveries.append(delivery)
        return held

    def hold_plan(self, plan: StepPlan, delivery: Any, now: float) -> HeldStep:
        """Hold the plan of a step not yet published; the first copy counts (and starts its timeout at `now`)."""
        held = self.hold(plan.step, delivery)
        assert held is not None, f"step {plan.step} is published: announce it again instead"
        if held.plan is None:
            held.plan, held.plan_seen_at = plan, now
        return held

    def due(self, now: float, timeout_s: float, complete: Callable[[HeldStep], bool]) -> list[tuple[HeldStep, bool]]:
        """The steps to publish on a tick, each with whether it timed out: a complete step whose publish failed
        is retried; a step whose plan arrived more than `timeout_s` ago goes out with what it has."""
        due = []
        for held in self.steps.values():
            if held.plan is None:
                continue  # no timeout before the plan: the step's shape is unknown
            if held.publish_failures and complete(held):
                due.append((held, False))
            elif now - held.plan_seen_at > timeout_s:
                due.append((held, True))
        return due

    def release(self, held: HeldStep, record: dict[str, Any]) -> list[Any]:
        """`held`'s batch is out as `record`: forget the step; its deliveries, to ack now."""
        self.published[held.step] = record
        del self.steps[held.step]
        return held.deliveries


def _identity(piece: Any) -> tuple[Any, ...]:
    """What tells two pieces under one key apart: their attempt, and the query and rollout they claim."""
    return (piece.attempt, getattr(piece, "query_id", None), getattr(piece, "rollout_index", None))


def batch_record(batch: AlignedBatch, num_chunks: int) -> dict[str, Any]:
    """The KV record of a published batch (and what a StepAligned repeats from it)."""
    return {"batch_id": batch.batch_id, "num_samples": len(batch.sample_ids), "num_chunks": num_chunks}


def batch_figures(
    figures: dict[str, float], held: HeldStep, late: int, timed_out: bool, num_chunks: int
) -> dict[str, float]:
    """A published step's metrics: the side's own figures, the held step's counts, the aligner's late pieces,
    whether it timed out, and how many chunks the batch took."""
    return {
        **figures,
        **{k: float(v) for k, v in held.counts.items()},
        "late": float(late),
        "timed_out": float(timed_out),
        "chunks": float(num_chunks),
    }
