"""The controller: B rollout requests per step on the JetStream work queue, the next step once both
sides are done with one, the run finished after `pipeline.steps` steps (docs/architecture.md §One training step,
steps 1 and 6); a single-agent run has only the main side to wait for. Its cursor lives in KV, so a restarted
controller resumes its steps. This module is the role's shell (KV, publishing plans, requests and events,
consuming); the cursor and the step window are mgrpo_actors/controller/cursor.py, the questions per step
mgrpo_actors/controller/questions.py.

Sync mode: one step at a time; step n+1's requests name the policy versions step n produced. Async mode
(docs/architecture.md, asynchronous mode): up to `pipeline.max_staleness` steps beyond the oldest unfinished one are
rolled out at once, each with the newest versions known when it is published; learners drop samples
more than max_staleness versions behind. Stage 1 / stage 2 of a curriculum: the first
`pipeline.stage1_steps` steps draw `pipeline.stage1_levels` questions (docs/method.md §Training schedule).

Cursor (KV bucket `state`, key `controller.cursor`; its saved form is StepCursor's, controller/cursor.py).
Requests and plans are published with JetStream de-duplication ids, so a controller that
died between publishing and writing its cursor can publish again without doubling anything.

Stall watchdog (controller/watchdog.py): every `pipeline.tick_s` it checks how long nothing moved; past
`pipeline.stall_timeout_s` it logs and publishes `step.stalled` (and the metric `controller.stalled_s`), naming the
step and what it waits for, and stops the run: its node exits 3 (`Bus.on_run_stopped`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.controller.cursor import Readiness, StepCursor, gate
from mgrpo_actors.controller.questions import step_schedule
from mgrpo_actors.controller.watchdog import Stall, StallWatch
from mgrpo_actors.monitoring.publish import RUN_FINISHED, publish_event, publish_metrics
from mgrpo_actors.runtime import Bus, BusActor, Delivery, Ticker
from mgrpo_actors.runtime.crossing import publish_crossing
from protocols import QueryDone, RolloutRequest, StepAligned, StepDone, StepPlan

__all__ = ["ControllerActor", "start_controller"]

CURSOR_KEY = "controller.cursor"
STEP_STALLED = "step.stalled"  # the event of a stalled run, just before its controller stops it


@dataclass(frozen=True)
class _Tick:
    """Note to self: check the watchdog."""


class ControllerActor(BusActor):
    """Runs the steps of one run."""

    role = "controller"

    def __init__(self, bus: Bus, config: NodeConfig) -> None:
        super().__init__(bus, name=f"controller-{bus.node}")
        self.config = config
        self.pipeline = config.pipeline
        self.cursor = StepCursor.for_config(config)
        self.started_at: dict[int, float] = {}  # step → when this controller saw it start
        self.watch = StallWatch(self.pipeline.stall_timeout_s, self.pipeline.rollout_timeout_s)
        self.ticker: Ticker | None = None  # the watchdog's clock, while it is on
        self._held: list[str] = []  # the sides that last held the next step back (logged when it changes)

    def handlers(self) -> dict:
        return {StepAligned: self.on_side_ready, StepDone: self.on_side_ready, QueryDone: self.on_query_done}

    def on_start(self) -> None:
        super().on_start()
        self.schedule = step_schedule(self.config)
        self.state = self.bus.kv(self.bus.subjects.bucket("state"))
        raw = self.state.get(CURSOR_KEY)
        self.cursor = StepCursor.for_config(self.config, raw)
        subjects = self.bus.subjects
        spec = self.bus.durables["controller"]  # step.aligned.<side> and step.done.<side>
        self.consume(*spec.where(subjects), max_ack_pending=spec.max_ack_pending, ack_wait_s=self.pipeline.ack_wait_s)
        self.listen(subjects.query_done)
        if self.cursor.finished:
            self.log.info("run already finished", steps=self.cursor.next)
            self._announce_finished()
            return
        for step in self.cursor.open_steps():
            self.started_at[step] = time.time()
            self.watch.step_started(step, None)
            self.log.info("resuming step", step=step, ready=self.cursor.open[step])
        self._publish_due(resumed=bool(raw))
        if self.pipeline.stall_timeout_s > 0:  # 0: no watchdog
            self.ticker = Ticker(self.actor_ref, self.pipeline.tick_s, _Tick, name=f"tick-{self.name}").start()

    def on_stop(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
        super().on_stop()

    def on_note(self, note: Any) -> Any:
        if isinstance(note, _Tick):
            stall = self.watch.check(self.cursor, {side: self.gate(side) for side in self.cursor.sides})
            return None if stall is None else self._stalled(stall)
        return super().on_note(note)

    def _stalled(self, stall: Stall) -> None:
        """Say so three ways (log, event, metric), then stop the run: its node exits 3 with the event's message."""
        message = stall.message()
        self.log.warning(
            "step stalled: stopping the run",
            step=stall.step,
            stalled_s=round(stall.quiet_s, 1),
            limit_s=stall.limit_s,
            waiting_for=stall.waiting_for,
            last_progress=stall.last_progress,
        )
        publish_metrics(self.bus, "controller", {"stalled_s": stall.quiet_s}, stall.step, self.role)
        publish_event(
            self.bus,
            STEP_STALLED,
            message,
            self.role,
            level="error",
            step=stall.step,
            stalled_s=stall.quiet_s,
            limit_s=stall.limit_s,
            waiting_for=stall.waiting_for,
            last_progress=stall.last_progress,
        )
        self.bus.stop_run(message)

    def _save(self) -> None:
        self.state.put(CURSOR_KEY, self.cursor.to_json().encode())

    def _publish_due(self, resumed: bool = False) -> None:
        """Publish every step the window allows (StepCursor.due_steps), saving the cursor after each."""
        for step in self.cursor.due_steps():
            self._start_step(step, resumed)
        held = self.cursor.held_by()
        if held and held != self._held:
            # The next step waits on learners (the version bound, controller/cursor.py): said once, not per message.
            self.log.info("next step waits for learners", step=self.cursor.next, sides=held, lag=self.cursor.lag)
        self._held = held

    def _start_step(self, step: int, resumed: bool) -> None:
        self.started_at[step] = time.time()
        questions = self.schedule.step(step)
        subjects, k = self.bus.subjects, self.pipeline.rollouts_per_query
        versions = self.cursor.versions  # the newest policies: sync mode rolls step n+1 out with step n's weights
        sub_versions = {side: versions[side] for side in self.config.sides[1:]}
        plan = StepPlan(
            run_id=self.bus.run_id,
            step=step,
            query_ids=[q.id for q in questions],
            num_rollouts=k,
            main_version=versions["main"],
            sub_versions=sub_versions,
            started_at=self.started_at[step],
        )
        # it crosses into SUB (deploy/accounts.py)
        publish_crossing(self.bus, subjects.step_start, plan, f"plan-{step}")
        for q in questions:
            request = RolloutRequest(
                run_id=self.bus.run_id,
                step=step,
                query_id=q.id,
                question=q.question,
                answers=q.answers,
                num_rollouts=k,
                main_version=versions["main"],
                sub_versions=sub_versions,
                metadata={"kind": q.kind, "level": q.level},
            )
            self.bus.js_publish(subjects.rollout_requests, request, msg_id=f"request-{step}-{q.id}")
        self.cursor.open_step(step)
        self._save()
        self.watch.step_started(step, len(questions))
        stage = f", stage {self.schedule.stage(step)}" if self.pipeline.stage1_steps else ""
        publish_event(
            self.bus,
            "step.started",
            f"step {step}: {len(questions)} queries × {k} rollouts{stage}" + (" (resumed)" if resumed else ""),
            self.role,
            step=step,
            queries=plan.query_ids,
            stage=self.schedule.stage(step),
            versions=dict(versions),
        )

    def on_query_done(self, done: QueryDone, delivery: Delivery) -> None:
        if done.step in self.cursor.open:
            seen = self.watch.query_done(done.step, done.query_id)
            if seen is None:
                return  # a repeat
            self.log.info(
                "query done",
                step=done.step,
                query=done.query_id,
                done=seen,
                of=self.pipeline.queries_per_step,
                sub_calls=done.sub_calls,
                failed=done.failed_rollouts,
            )

    def gate(self, side: str) -> type:
        """What ends a step for a side (controller/cursor.py gate)."""
        return gate(self.config, side)

    def on_side_ready(self, message: StepAligned | StepDone, delivery: Delivery) -> None:
        # The cursor changes before it is saved: a save that fails (a KV timeout while the cluster elects a new
        # leader) hands the message back, and its redelivery must find the cursor as it was, or the step it closed
        # is taken as closed already and never announced (the run would never finish).
        before = copy.deepcopy(self.cursor)
        try:
            self._side_ready(message)
        except Exception:
            self.cursor = before
            raise

    def _side_ready(self, message: StepAligned | StepDone) -> None:
        if message.side not in self.cursor.sides:  # a node run with another config (its sub-agent types): refused
            raise ValueError(f"{message.side!r} is not a side of this run (its sides: {', '.join(self.cursor.sides)})")
        if isinstance(message, StepDone):
            before = self.cursor.versions[message.side]
            self.cursor.record_version(message.side, message.version)
            if self.cursor.versions[message.side] > before:
                self.watch.progressed(f"{message.side} learner applied step {message.step} (version {message.version})")
        else:
            self.watch.batch_out(message.step, message.side)
        if not isinstance(message, self.gate(message.side)):
            # advance_on: batches: a StepDone is no gate, but its version may release a step the bound held back, or
            # be the last learner's last step, which ends the run (controller/cursor.py)
            if isinstance(message, StepDone) and not self.cursor.finished:
                finished = self.cursor.finish_if_learned()
                self._save()
                if finished:
                    self._announce_finished()
                    self.log.info("run finished", steps=self.cursor.next)
                else:
                    self._publish_due()
            return
        readiness = self.cursor.side_ready(message.side, message.step)
        if readiness is Readiness.IGNORED:
            return  # an earlier step's, or a repeat: nothing to do (acked)
        if readiness is Readiness.FINISHED:
            self._finish_step(message.step)
        else:
            self.watch.progressed(f"{message.side} done with step {message.step} ({type(message).__name__})")
            self._save()
        if not self.cursor.finished:
            self._publish_due()

    def _finish_step(self, step: int) -> None:
        """Save the cursor that closed the step, then say so: a controller that dies in between never
        announced an end its cursor lacks (restarted after the last step, it says the run finished)."""
        seconds = time.time() - self.started_at.pop(step, time.time())
        self.watch.step_closed(step)
        self._save()
        publish_event(
            self.bus, "step.finished", f"step {step} finished in {seconds:.1f} s", self.role, step=step, seconds=seconds
        )
        if self.cursor.finished:
            self._announce_finished()
            self.log.info("run finished", steps=self.cursor.next)

    def _announce_finished(self) -> None:
        steps = self.cursor.next
        publish_event(
            self.bus, RUN_FINISHED, f"run {self.bus.run_id} finished after {steps} steps", self.role, steps=steps
        )


def start_controller(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The run's controller (one per run)."""
    started.append(ControllerActor.start_ready(bus, config, timeout_s=120))
