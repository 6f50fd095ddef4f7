"""What the main and the sub aligner share: per step, hold the step's plan and pieces (unacked, kept
alive) until the step is complete or timed out; then publish exactly one batch to the side's learner
stream, record it in KV, ack everything it used, and tell the controller (docs/architecture.md §One training step,
step 5; §Delivery and state: "a sample is acked only after it is safely handed on").

Idempotent under redelivery: a step whose batch is recorded as published (KV `aligned.<side>.<step>`)
only acks what still arrives for it (counted as late); the batch's chunks and its StepAligned carry
JetStream de-duplication ids, so publishing them again after a crash (within the streams'
de-duplication window) stores nothing twice, and the same step always aligns the same way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from mgrpo_actors.alignment.batch_rows import split_batch
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring.publish import publish_event, publish_metrics
from mgrpo_actors.runtime import HOLD, Bus, BusActor, Delivery, Ticker
from mgrpo_actors.runtime.crossing import publish_crossing
from protocols import StepAligned, StepPlan
from protocols.durables import DURABLES

__all__ = ["AlignerActor", "HeldStep"]


@dataclass(frozen=True)
class _Tick:
    """Note to self: check timeouts."""


@dataclass
class HeldStep:
    """What an aligner holds of one step until its batch is published."""

    step: int
    plan: StepPlan | None = None
    plan_seen_at: float = 0.0  # time.monotonic() when the plan arrived
    deliveries: list[Delivery] = field(default_factory=list)
    pieces: dict[str, dict] = field(default_factory=dict)  # subclass-defined collections by name
    counts: dict[str, int] = field(default_factory=dict)  # duplicates, superseded, … for the metrics
    publish_failures: int = 0  # failed attempts at publishing the step's batch (retried each tick)
    result: Any = None  # what build() leaves for after_publish()

    def collection(self, name: str) -> dict:
        return self.pieces.setdefault(name, {})

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def keep_first(self, collection: str, key: Any, message: Any) -> None:
        """Keep the first message per key; count a repeat as a duplicate (same attempt, e.g. redelivered)
        or as superseded (another attempt at the same rollout, whose first complete one counts)."""
        received = self.collection(collection)
        if key not in received:
            received[key] = message
        else:
            self.count("duplicates" if received[key].attempt == message.attempt else "superseded")


class AlignerActor(BusActor):
    """Base of the two aligners. A subclass sets `side`, starts its consumers in `on_start`, adds
    pieces in its handlers (through `held_step` and `try_publish`), and defines
    `complete(held) -> bool` (the step has everything) and `build(held) -> (batch, metrics)`, which
    must have no side effects (a failed publish builds the step again); `after_publish` may have them."""

    side = ""

    def __init__(self, bus: Bus, config: NodeConfig) -> None:
        super().__init__(bus, name=f"{self.side}-aligner-{bus.node}")
        self.config = config
        self.pipeline = config.pipeline
        self.steps: dict[int, HeldStep] = {}
        self.published: dict[int, dict[str, Any]] = {}
        self.late = 0

    complete: Any  # (held: HeldStep) -> bool, defined by the subclass
    build: Any  # (held: HeldStep) -> tuple[AlignedBatch, dict[str, float]], defined by the subclass

    def consume_side(self, durable: str) -> None:
        # Held pieces stay unacked until their step is published: a whole step's worth in flight (DURABLES).
        spec = DURABLES[durable]
        self.consume(
            *spec.where(self.bus.subjects),
            batch=spec.max_ack_pending,
            max_ack_pending=spec.max_ack_pending,
            ack_wait_s=self.pipeline.ack_wait_s,
        )

    # ---- wiring ------------------------------------------------------------------------------
    def on_start(self) -> None:
        super().on_start()
        subjects = self.bus.subjects
        self.state = self.bus.kv(subjects.bucket(f"state-{self.side}"))
        self.consume_side(f"{self.side}-aligner-plans")
        self.ticker = Ticker(self.actor_ref, self.pipeline.tick_s, _Tick, name=f"tick-{self.name}").start()

    def on_stop(self) -> None:
        self.ticker.stop()
        super().on_stop()

    def handlers(self) -> dict:
        return {StepPlan: self.on_plan}

    def on_note(self, note: Any) -> Any:
        if isinstance(note, _Tick):
            return self._check_timeouts()
        return super().on_note(note)

    # ---- holding -----------------------------------------------------------------------------
    def published_record(self, step: int) -> dict[str, Any] | None:
        """What was published for `step` ({batch_id, num_samples, num_chunks}), None if nothing yet."""
        if step not in self.published:
            raw = self.state.get(f"aligned.{self.side}.{step}")
            if raw is None:
                return None
            self.published[step] = json.loads(raw)
        return self.published[step]

    def held_step(self, step: int, delivery: Delivery) -> HeldStep | None:
        """The step to add a piece to (the delivery is now held), or None if its batch is out (acked, counted late)."""
        record = self.published_record(step)
        if record is not None:
            self.late += 1
            return None
        held = self.steps.setdefault(step, HeldStep(step))
        held.deliveries.append(delivery)
        return held

    def on_plan(self, plan: StepPlan, delivery: Delivery) -> Any:
        record = self.published_record(plan.step)
        if record is not None:
            # A plan delivered again: this aligner died after publishing. Tell the controller again
            # (de-duplicated), in case it died before it could.
            self._announce(plan.step, record, {})
            return None
        held = self.held_step(plan.step, delivery)
        assert held is not None
        if held.plan is None:
            held.plan, held.plan_seen_at = plan, time.monotonic()
        return self.try_publish(held)

    def try_publish(self, held: HeldStep) -> Any:
        if held.plan is not None and self.complete(held):
            self.publish(held, timed_out=False)
        return HOLD

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        for held in list(self.steps.values()):
            if held.plan is None:
                continue
            if held.publish_failures and self.complete(held):
                self.publish(held, timed_out=False)  # a complete step whose publish failed: again
            elif now - held.plan_seen_at > self.pipeline.rollout_timeout_s:
                self.log.warning(
                    "step timed out: publishing what arrived", step=held.step, timeout_s=self.pipeline.rollout_timeout_s
                )
                self.publish(held, timed_out=True)

    # ---- publishing --------------------------------------------------------------------------
    def publish(self, held: HeldStep, timed_out: bool) -> None:
        """Batch (in chunks), StepAligned, then the KV record, then the acks: a crash anywhere before the
        record re-runs the step (de-duplicated ids, same seed, same batch); after it, a redelivered plan
        announces the batch again. A failure leaves the step held and is retried on the next tick."""
        try:
            batch, figures = self.build(held)
            chunks = split_batch(batch, self.bus.max_bytes)
            for chunk in chunks:
                self.bus.js_publish(
                    self.bus.subjects.batches(self.side),
                    chunk,
                    timeout_s=30.0,
                    msg_id=f"{batch.batch_id}#{chunk.chunk}",
                )
            figures = {
                **figures,
                **{k: float(v) for k, v in held.counts.items()},
                "late": float(self.late),
                "timed_out": float(timed_out),
                "chunks": float(len(chunks)),
            }
            record = {"batch_id": batch.batch_id, "num_samples": len(batch.sample_ids), "num_chunks": len(chunks)}
            if not held.publish_failures:  # the batch is stored: say so (before the controller moves on)
                publish_metrics(self.bus, self.side, figures, held.step, self.role)
                publish_event(
                    self.bus,
                    f"{self.side}.batch",
                    f"{self.side} batch of step {held.step}: {record['num_samples']} samples",
                    self.role,
                    step=held.step,
                    **figures,
                )
            self._announce(held.step, record, figures)
            self.state.put(f"aligned.{self.side}.{held.step}", json.dumps(record).encode())
        except Exception as exc:
            held.publish_failures += 1
            self.log.error(
                "batch not published; retrying on the next tick",
                step=held.step,
                attempt=held.publish_failures,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        self.published[held.step] = record
        del self.steps[held.step]
        for delivery in held.deliveries:
            delivery.ack()
        self.after_publish(held)

    def after_publish(self, held: HeldStep) -> None:
        """What a subclass updates only once a step's batch is out (the sub side's D estimate)."""

    def _announce(self, step: int, record: dict[str, Any], figures: dict[str, float]) -> None:
        ready = StepAligned(
            run_id=self.bus.run_id,
            side=self.side,
            step=step,
            batch_id=record["batch_id"],
            num_samples=record["num_samples"],
            stats=figures,
            num_chunks=record["num_chunks"],
        )
        # The sub side's crosses into MAIN, to the controller (deploy/accounts.py).
        publish_crossing(
            self.bus,
            self.bus.subjects.step_aligned(self.side),
            ready,
            f"ready-{record['batch_id']}",
            crosses=self.side == "sub",
        )
