"""What the main and the sub aligner share: per step, hold the step's plan and pieces (unacked, kept
alive) until the step is complete or timed out; then publish exactly one batch to the side's learner
stream, record it in KV, ack everything it used, and tell the controller (docs/architecture.md §One training step,
step 5; §Delivery and state: "a sample is acked only after it is safely handed on").

Idempotent under redelivery: a step whose batch is recorded as published (KV `aligned.<side>.recent`,
alignment/records.py)
only acks what still arrives for it (counted as late); the batch's chunks and its StepAligned carry
JetStream de-duplication ids, so publishing them again after a crash (within the streams'
de-duplication window) stores nothing twice, and the same step always aligns the same way.

This module is the roles' shell (consuming, publishing the chunks, KV, acks, metrics); what is held of each
step, which steps are due and what was published is mgrpo_actors/alignment/holding.py, and each side's
completeness is alignment/main.py / alignment/sub.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mgrpo_actors.alignment.batch_rows import split_batch
from mgrpo_actors.alignment.holding import HeldStep, StepHolding, batch_figures, batch_record
from mgrpo_actors.alignment.piece_checks import plan_reason
from mgrpo_actors.alignment.records import PublishedRecords
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring.publish import publish_event, publish_metrics
from mgrpo_actors.runtime import HOLD, Bus, BusActor, Delivery, Ticker
from mgrpo_actors.runtime.crossing import publish_crossing
from mgrpo_actors.runtime.retention import ConsumedWork
from protocols import StepAligned, StepPlan

__all__ = ["AlignerActor"]


@dataclass(frozen=True)
class _Tick:
    """Note to self: check timeouts."""


class AlignerActor(BusActor):
    """Base of the two aligners. A subclass sets `side`, starts its consumers in `on_start`, adds
    pieces in its handlers (through `held_step`, `admit` and `try_publish`), and defines
    `complete(held) -> bool` (the step has everything) and `build(held) -> (batch, metrics)`, which
    must have no side effects (a failed publish builds the step again); `before_record` and `after_publish` may
    have them."""

    side = ""
    # The durables whose stream this aligner alone reads (protocols.durables.work_durables): what they acknowledged
    # is removed nats.keep_consumed_steps published steps later (runtime/retention.py).
    work_durables: tuple[str, ...] = ()

    def __init__(self, bus: Bus, config: NodeConfig) -> None:
        super().__init__(bus, name=f"{self.side}-aligner-{bus.node}")
        self.config = config
        self.pipeline = config.pipeline
        self.holding = StepHolding(self._saved_record)

    complete: Any  # (held: HeldStep) -> bool, defined by the subclass
    build: Any  # (held: HeldStep) -> tuple[AlignedBatch, dict[str, float]], defined by the subclass

    def consume_side(self, durable: str) -> None:
        # Held pieces stay unacked until their step is published: a whole step's worth in flight (DURABLES).
        spec = self.bus.durables[durable]
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
        self.records = PublishedRecords(self.state, self.side)
        keep = self.config.nats.keep_consumed_steps
        self.consumed = [ConsumedWork(self.bus, durable, keep) for durable in self.work_durables]
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

    # ---- holding (mgrpo_actors/alignment/holding.py) -----------------------------------------
    def _saved_record(self, step: int) -> bytes | None:
        return self.records.get(step)

    def held_step(self, step: int, delivery: Delivery) -> HeldStep | None:
        """The step to add a piece to (the delivery is now held), or None if its batch is out (acked, counted late)."""
        return self.holding.hold(step, delivery)

    def on_plan(self, plan: StepPlan, delivery: Delivery) -> Any:
        record = self.holding.published_record(plan.step)
        if record is not None:
            # A plan delivered again: this aligner died after publishing. Tell the controller again
            # (de-duplicated), in case it died before it could; a step too old to have its record kept was
            # heard of long ago (alignment/records.py).
            if not record.get("forgotten"):
                self._announce(plan.step, record, {})
            return None
        held = self.holding.hold_plan(plan, delivery, time.monotonic())
        waiting, held.waiting = held.waiting, []
        for collection, key, piece, piece_delivery in waiting:  # what came before the plan is checked now
            self.admit(held, collection, key, piece, piece_delivery)
        return self.try_publish(held)

    # ---- what counts (mgrpo_actors/alignment/piece_checks.py) ---------------------------------
    def admit(self, held: HeldStep, collection: str, key: Any, piece: Any, delivery: Delivery) -> None:
        """Keep `piece` in `held`'s `collection` once it passes the checks against the step's plan and the
        side's own (`piece_reason`); one that is refused is dead-lettered and counted. A piece that comes before
        its plan waits for it (the plan's consumer and the pieces' are separate)."""
        if held.plan is None:
            held.waiting.append((collection, key, piece, delivery))
            return
        reason = plan_reason(held.plan, piece) or self.piece_reason(held, piece)
        if reason is not None:
            held.forget_delivery(delivery)
            self.refuse(held, delivery, piece, reason)
            return
        held.keep_first(collection, key, piece, delivery)
        self.after_keep(held, piece)

    def piece_reason(self, held: HeldStep, piece: Any) -> str | None:
        """Why `piece` cannot be one of this side's (None: it can); the subclass's checks."""
        return None

    def after_keep(self, held: HeldStep, piece: Any) -> None:
        """What a subclass checks once `piece` is kept (the sub side: trajectories against the stats naming them)."""

    def refuse(self, held: HeldStep, delivery: Delivery | None, piece: Any, reason: str) -> None:
        """`piece` of `held` is not aligned: dead-lettered with the reason, counted (`refused` in the batch's
        metrics) and said (`<side>.refused` event)."""
        held.count("refused")
        what = f"{type(piece).__name__} of step {held.step} refused: {reason}"
        if delivery is not None:
            self._dead_letter(delivery, what, "PieceCheck")
        publish_event(self.bus, f"{self.side}.refused", what, self.role, level="error", step=held.step)

    def try_publish(self, held: HeldStep) -> Any:
        if held.plan is not None and self.complete(held):
            self.publish(held, timed_out=False)
        return HOLD

    def _check_timeouts(self) -> None:
        timeout_s = self.pipeline.rollout_timeout_s
        for held, timed_out in self.holding.due(time.monotonic(), timeout_s, self.complete):
            if timed_out:
                self.log.warning("step timed out: publishing what arrived", step=held.step, timeout_s=timeout_s)
            self.publish(held, timed_out=timed_out)  # else a complete step whose publish failed: again

    # ---- publishing --------------------------------------------------------------------------
    def publish(self, held: HeldStep, timed_out: bool) -> None:
        """Batch (in chunks), what `before_record` stores, StepAligned, then the KV record, then the acks: a crash
        anywhere before the record re-runs the step (de-duplicated ids, same seed, same batch); after it, a
        redelivered plan announces the batch again. A failure leaves the step held and is retried on the next
        tick."""
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
            self.before_record(held)
            figures = batch_figures(figures, held, self.holding.late, timed_out, len(chunks))
            record = batch_record(batch, len(chunks))
            if not held.figures_sent:  # the batch is stored: say so (before the controller moves on), once
                held.figures_sent = True
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
            self.records.put(held.step, record)  # commits the step
        except Exception as exc:
            held.publish_failures += 1
            self.log.error(
                "batch not published; retrying on the next tick",
                step=held.step,
                attempt=held.publish_failures,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        for delivery in self.holding.release(held, record):
            delivery.ack()
        for consumed in self.consumed:
            consumed.after_step()
        self.after_publish(held)

    def before_record(self, held: HeldStep) -> None:
        """What a subclass must store before the step's KV record commits it (the sub side's ablation queue):
        a crash before the record builds the step again, a failure here retries the publish."""

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
        # A sub-agent type's crosses into MAIN, to the controller (deploy/accounts.py).
        publish_crossing(
            self.bus,
            self.bus.subjects.step_aligned(self.side),
            ready,
            f"ready-{record['batch_id']}",
            crosses=self.side != "main",
        )
