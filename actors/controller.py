"""The controller: B rollout requests per step on the JetStream work queue, the next step once both
sides are done with one, the run finished after `pipeline.steps` steps (docs/architecture.md §One training step,
steps 1 and 6); a single-agent run has only the main side to wait for. Its cursor lives in KV, so a restarted controller resumes its steps.

Sync mode: one step at a time; step n+1's requests name the policy versions step n produced. Async mode
(docs/architecture.md, asynchronous mode): up to `pipeline.max_staleness` steps beyond the oldest unfinished one are
rolled out at once, each with the newest versions known when it is published; learners drop samples
more than max_staleness versions behind. Stage 1 / stage 2 of a curriculum: the first
`pipeline.stage1_steps` steps draw `pipeline.stage1_levels` questions (docs/method.md §Training schedule).

Cursor (KV bucket `state`, key `controller.cursor`): {"next": the next step to publish, "open": {step:
[sides ready]} for the published, unfinished steps, "finished": bool, "versions": {side: newest policy
version}}. Requests and plans are published with JetStream de-duplication ids, so a controller that
died between publishing and writing its cursor can publish again without doubling anything.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mgrpo_actors.agents.setup import load_task_questions
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.controller.schedule import CurriculumSchedule, StepSchedule
from mgrpo_actors.monitoring.publish import RUN_FINISHED, publish_event
from mgrpo_actors.runtime import Bus, BusActor, Delivery
from mgrpo_actors.runtime.crossing import publish_crossing
from protocols import SIDES, QueryDone, RolloutRequest, StepAligned, StepDone, StepPlan
from protocols.durables import DURABLES

__all__ = ["ControllerActor", "start_controller", "step_schedule"]

CURSOR_KEY = "controller.cursor"


class ControllerActor(BusActor):
    """Runs the steps of one run."""

    role = "controller"

    def __init__(self, bus: Bus, config: NodeConfig) -> None:
        super().__init__(bus, name=f"controller-{bus.node}")
        self.config = config
        self.pipeline = config.pipeline
        self.cursor: dict[str, Any] = {}
        self.started_at: dict[int, float] = {}  # step → when this controller saw it start
        self.queries_done: dict[int, set[str]] = {}

    def handlers(self) -> dict:
        return {StepAligned: self.on_side_ready, StepDone: self.on_side_ready, QueryDone: self.on_query_done}

    def on_start(self) -> None:
        super().on_start()
        self.schedule = step_schedule(self.config)
        self.state = self.bus.kv(self.bus.subjects.bucket("state"))
        raw = self.state.get(CURSOR_KEY)
        self.cursor = (
            json.loads(raw)
            if raw
            else {"next": 0, "open": {}, "finished": False, "versions": {side: 0 for side in SIDES}}
        )
        subjects = self.bus.subjects
        spec = DURABLES["controller"]  # step.aligned.<side> and step.done.<side>
        self.consume(*spec.where(subjects), max_ack_pending=spec.max_ack_pending, ack_wait_s=self.pipeline.ack_wait_s)
        self.listen(subjects.query_done)
        if self.cursor["finished"]:
            self.log.info("run already finished", steps=self.cursor["next"])
            publish_event(
                self.bus,
                RUN_FINISHED,
                f"run {self.bus.run_id} finished after {self.cursor['next']} steps",
                self.role,
                steps=self.cursor["next"],
            )
            return
        for step in self._open_steps():
            self.started_at[step] = time.time()
            self.log.info("resuming step", step=step, ready=self.cursor["open"][str(step)])
        self._publish_due(resumed=bool(raw))

    def _save(self) -> None:
        self.state.put(CURSOR_KEY, json.dumps(self.cursor).encode())

    def _open_steps(self) -> list[int]:
        return sorted(int(step) for step in self.cursor["open"])

    def _publish_due(self, resumed: bool = False) -> None:
        """Publish every step the window allows: none open in sync mode, up to max_staleness ahead in async."""
        while self.cursor["next"] < self.pipeline.steps:
            open_steps = self._open_steps()
            if open_steps and self.cursor["next"] > open_steps[0] + self.pipeline.steps_ahead:
                return
            self._start_step(self.cursor["next"], resumed)

    def _start_step(self, step: int, resumed: bool) -> None:
        self.started_at[step] = time.time()
        self.queries_done[step] = set()
        questions = self.schedule.step(step)
        subjects, k = self.bus.subjects, self.pipeline.rollouts_per_query
        versions = self.cursor["versions"]  # the newest policies: sync mode rolls step n+1 out with step n's weights
        plan = StepPlan(
            run_id=self.bus.run_id,
            step=step,
            query_ids=[q.id for q in questions],
            num_rollouts=k,
            main_version=versions["main"],
            sub_version=versions["sub"],
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
                sub_version=versions["sub"],
                metadata={"kind": q.kind, "level": q.level},
            )
            self.bus.js_publish(subjects.rollout_requests, request, msg_id=f"request-{step}-{q.id}")
        self.cursor["open"][str(step)] = []
        self.cursor["next"] = step + 1
        self._save()
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
        if str(done.step) in self.cursor["open"]:
            seen = self.queries_done.setdefault(done.step, set())
            seen.add(done.query_id)
            self.log.info(
                "query done",
                step=done.step,
                query=done.query_id,
                done=len(seen),
                of=self.pipeline.queries_per_step,
                sub_calls=done.sub_calls,
                failed=done.failed_rollouts,
            )

    def gate(self, side: str) -> type:
        """What ends a step for a side: its learner's StepDone, or its StepAligned (an agent that does not train, or no learners)."""
        trains = self.pipeline.advance_on == "learners" and self.config.trains(side)
        return StepDone if trains else StepAligned

    def on_side_ready(self, message: StepAligned | StepDone, delivery: Delivery) -> None:
        if isinstance(message, StepDone):
            self.cursor["versions"][message.side] = max(message.version, self.cursor["versions"][message.side])
        if not isinstance(message, self.gate(message.side)):
            return
        ready = self.cursor["open"].get(str(message.step))
        if self.cursor["finished"] or ready is None or message.side in ready:
            return  # an earlier step's, or a repeat: nothing to do (acked)
        self.cursor["open"][str(message.step)] = sorted({*ready, message.side})
        if set(self.cursor["open"][str(message.step)]) == set(self.config.sides):
            self._finish_step(message.step)
        else:
            self._save()
        if not self.cursor["finished"]:
            self._publish_due()

    def _finish_step(self, step: int) -> None:
        """Close the step in the cursor and save it, then say so: a controller that dies in between never
        announced an end its cursor lacks (restarted after the last step, it says the run finished)."""
        seconds = time.time() - self.started_at.pop(step, time.time())
        self.queries_done.pop(step, None)
        del self.cursor["open"][str(step)]
        self.cursor["finished"] = self.cursor["next"] >= self.pipeline.steps and not self.cursor["open"]
        self._save()
        publish_event(
            self.bus, "step.finished", f"step {step} finished in {seconds:.1f} s", self.role, step=step, seconds=seconds
        )
        if self.cursor["finished"]:
            publish_event(
                self.bus,
                RUN_FINISHED,
                f"run {self.bus.run_id} finished after {self.cursor['next']} steps",
                self.role,
                steps=self.cursor["next"],
            )
            self.log.info("run finished", steps=self.cursor["next"])


def step_schedule(config: NodeConfig) -> CurriculumSchedule:
    """The run's questions per step (stage 1, then stage 2); ValueError naming the key if the dataset
    cannot fill a step."""
    pipeline, seed = config.pipeline, config.run.seed
    questions = load_task_questions(pipeline, config.tools)
    stage1 = (
        StepSchedule(questions.training(pipeline, stage=1), pipeline.queries_per_step, seed, pipeline.shuffle)
        if pipeline.stage1_steps
        else None
    )
    stage2 = StepSchedule(questions.training(pipeline), pipeline.queries_per_step, seed, pipeline.shuffle)
    return CurriculumSchedule(stage1, pipeline.stage1_steps, stage2)


def start_controller(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The run's controller (one per run)."""
    started.append(ControllerActor.start_ready(bus, config, timeout_s=120))
