"""What the main and the sub aligner share: per step, hold the step's plan and pieces (unacked, kept
alive) until the step is complete or timed out; then publish exactly one batch to the side's learner
stream, record it in KV, ack everything it used, and tell the controller (design.md §One training step,
step 5; §Delivery and state: "a sample is acked only after it is safely handed on").

Idempotent under redelivery: a step whose batch is recorded as published (KV `aligned.<side>.<step>`)
only acks what still arrives for it (counted as late); the batch is published with its batch id as
JetStream de-duplication id, so publishing it again after a crash stores nothing twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.pipeline.main_alignment import batch_id
from mgrpo_actors.pipeline.reporting import publish_event, publish_metrics
from mgrpo_actors.runtime import HOLD, Bus, BusActor, Delivery, Ticker
from protocols import BatchReady, StepPlan

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

    def collection(self, name: str) -> dict:
        return self.pieces.setdefault(name, {})

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1


class AlignerActor(BusActor):
    """Base of the two aligners. A subclass sets `side`, starts its consumers in `on_start`, adds
    pieces in its handlers (through `held_step` and `try_publish`), and defines
    `complete(held) -> bool` (the step has everything) and `build(held) -> (batch, metrics)`."""

    side = ""

    def __init__(self, bus: Bus, config: NodeConfig) -> None:
        super().__init__(bus, name=f"{self.side}-aligner-{bus.node}")
        self.config = config
        self.pipeline = config.pipeline
        self.steps: dict[int, HeldStep] = {}
        self.published: set[int] = set()
        self.late = 0

    complete: Any  # (held: HeldStep) -> bool, defined by the subclass
    build: Any  # (held: HeldStep) -> tuple[AlignedBatch, dict[str, float]], defined by the subclass

    def consume_side(self, stream: str, durable: str, subject: str | None = None) -> None:
        # Held pieces stay unacked until their step is published: allow a whole step's worth in flight.
        self.consume(stream, durable, subject=subject, batch=100_000, max_ack_pending=100_000, ack_wait_s=self.pipeline.ack_wait_s)

    # ---- wiring ------------------------------------------------------------------------------
    def on_start(self) -> None:
        super().on_start()
        subjects = self.bus.subjects
        self.state = self.bus.kv(subjects.bucket("state"))
        self.consume_side(subjects.stream("steps"), f"{self.side}-aligner-plans", subject=subjects.step_start)
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
    def is_published(self, step: int) -> bool:
        if step in self.published:
            return True
        if self.state.get(f"aligned.{self.side}.{step}") is not None:
            self.published.add(step)
            return True
        return False

    def held_step(self, step: int, delivery: Delivery) -> HeldStep | None:
        """The step to add a piece to (the delivery is now held), or None if its batch is out (acked, counted late)."""
        if self.is_published(step):
            self.late += 1
            return None
        held = self.steps.setdefault(step, HeldStep(step))
        held.deliveries.append(delivery)
        return held

    def on_plan(self, plan: StepPlan, delivery: Delivery) -> Any:
        held = self.held_step(plan.step, delivery)
        if held is None:
            return None
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
            if held.plan is not None and now - held.plan_seen_at > self.pipeline.rollout_timeout_s:
                self.log.warning("step timed out: publishing what arrived", step=held.step, timeout_s=self.pipeline.rollout_timeout_s)
                self.publish(held, timed_out=True)

    # ---- publishing --------------------------------------------------------------------------
    def publish(self, held: HeldStep, timed_out: bool) -> None:
        batch, figures = self.build(held)
        subjects = self.bus.subjects
        self.bus.js_publish(subjects.batches(self.side), batch, timeout_s=30.0, msg_id=batch.batch_id)
        self.state.put(f"aligned.{self.side}.{held.step}", batch.batch_id.encode())
        self.published.add(held.step)
        del self.steps[held.step]
        for delivery in held.deliveries:
            delivery.ack()
        figures = {**figures, **{k: float(v) for k, v in held.counts.items()}, "late": float(self.late), "timed_out": float(timed_out)}
        ready = BatchReady(run_id=self.bus.run_id, side=self.side, step=held.step, batch_id=batch.batch_id, num_samples=len(batch.sample_ids), stats=figures)
        self.bus.js_publish(subjects.step_aligned(self.side), ready, msg_id=f"ready-{batch_id(self.bus.run_id, self.side, held.step)}")
        publish_metrics(self.bus, self.side, figures, held.step, self.role)
        publish_event(self.bus, f"{self.side}.batch", f"{self.side} batch of step {held.step}: {len(batch.sample_ids)} samples", self.role, step=held.step, **figures)
