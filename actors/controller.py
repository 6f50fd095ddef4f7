"""The controller: B rollout requests per step on the JetStream work queue, the next step once both
sides are done with this one, the run finished after `pipeline.steps` steps (design.md §One training
step, steps 1 and 6). Its cursor lives in KV, so a restarted controller resumes its step.

Cursor (KV bucket `state`, key `controller.cursor`): {"step", "published", "ready": [sides], "finished",
"versions": {side: newest policy version}}.
Requests and plans are published with JetStream de-duplication ids, so a controller that died between
publishing and writing its cursor can publish again without doubling anything.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mgrpo_actors.agents.setup import load_task_questions
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.pipeline.reporting import publish_event
from mgrpo_actors.pipeline.schedule import StepSchedule
from mgrpo_actors.runtime import Bus, BusActor, Delivery
from protocols import SIDES, BatchReady, QueryDone, RolloutRequest, StepDone, StepPlan

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
        self.step_started = 0.0
        self.queries_done: set[str] = set()

    def handlers(self) -> dict:
        return {BatchReady: self.on_side_ready, StepDone: self.on_side_ready, QueryDone: self.on_query_done}

    def on_start(self) -> None:
        super().on_start()
        self.schedule = step_schedule(self.config)
        self.state = self.bus.kv(self.bus.subjects.bucket("state"))
        raw = self.state.get(CURSOR_KEY)
        self.cursor = json.loads(raw) if raw else {"step": 0, "published": False, "ready": [], "finished": False, "versions": {side: 0 for side in SIDES}}
        subjects = self.bus.subjects
        # step.aligned.<side> and step.done.<side> (not step.start, which is the controller's own).
        self.consume(subjects.stream("steps"), "controller", subject=f"{subjects.root}.step.*.*", ack_wait_s=self.pipeline.ack_wait_s)
        self.listen(subjects.rollout_done)
        if self.cursor["finished"]:
            self.log.info("run already finished", steps=self.cursor["step"])
            publish_event(self.bus, "run.finished", f"run {self.bus.run_id} finished after {self.cursor['step']} steps", self.role, steps=self.cursor["step"])
            return
        self._start_step(resumed=bool(raw))

    def _save(self) -> None:
        self.state.put(CURSOR_KEY, json.dumps(self.cursor).encode())

    def _start_step(self, resumed: bool = False) -> None:
        step = self.cursor["step"]
        self.step_started = time.time()
        self.queries_done = set()
        if self.cursor["published"]:
            self.log.info("resuming step", step=step, ready=self.cursor["ready"])
            return
        questions = self.schedule.step(step)
        subjects, k = self.bus.subjects, self.pipeline.rollouts_per_query
        versions = self.cursor["versions"]  # the newest policies: sync mode rolls step n+1 out with step n's weights
        plan = StepPlan(run_id=self.bus.run_id, step=step, query_ids=[q.id for q in questions], num_rollouts=k, main_version=versions["main"],
                        sub_version=versions["sub"], started_at=self.step_started)  # fmt: skip
        self.bus.js_publish(subjects.step_start, plan, msg_id=f"plan-{step}")
        for q in questions:
            request = RolloutRequest(run_id=self.bus.run_id, step=step, query_id=q.id, question=q.question, answers=q.answers, num_rollouts=k,
                                     main_version=versions["main"], sub_version=versions["sub"], metadata={"kind": q.kind, "level": q.level})  # fmt: skip
            self.bus.js_publish(subjects.rollout_requests, request, msg_id=f"request-{step}-{q.id}")
        self.cursor["published"] = True
        self._save()
        publish_event(self.bus, "step.started", f"step {step}: {len(questions)} queries × {k} rollouts" + (" (resumed)" if resumed else ""), self.role, step=step, queries=plan.query_ids)

    def on_query_done(self, done: QueryDone, delivery: Delivery) -> None:
        if done.step == self.cursor["step"]:
            self.queries_done.add(done.query_id)
            self.log.info("query done", step=done.step, query=done.query_id, done=len(self.queries_done), of=self.pipeline.queries_per_step, sub_calls=done.sub_calls, failed=done.failed_rollouts)

    def gate(self, side: str) -> type:
        """What ends a step for a side: its learner's StepDone, or its BatchReady (frozen agent, or no learners)."""
        trains = self.pipeline.advance_on == "learners" and not getattr(self.config.learners, side).frozen
        return StepDone if trains else BatchReady

    def on_side_ready(self, message: BatchReady | StepDone, delivery: Delivery) -> None:
        if isinstance(message, StepDone):
            self.cursor["versions"][message.side] = max(message.version, self.cursor["versions"][message.side])
        if not isinstance(message, self.gate(message.side)):
            return
        if self.cursor["finished"] or message.step != self.cursor["step"] or message.side in self.cursor["ready"]:
            return  # an earlier step's, or a repeat: nothing to do (acked)
        self.cursor["ready"] = sorted({*self.cursor["ready"], message.side})
        self._save()
        if set(self.cursor["ready"]) == set(SIDES):
            self._finish_step()

    def _finish_step(self) -> None:
        step = self.cursor["step"]
        seconds = time.time() - self.step_started
        publish_event(self.bus, "step.finished", f"step {step} finished in {seconds:.1f} s", self.role, step=step, seconds=seconds)
        done = step + 1 >= self.pipeline.steps
        self.cursor = {"step": step + 1, "published": False, "ready": [], "finished": done, "versions": self.cursor["versions"]}
        self._save()
        if done:
            publish_event(self.bus, "run.finished", f"run {self.bus.run_id} finished after {step + 1} steps", self.role, steps=step + 1)
            self.log.info("run finished", steps=step + 1)
        else:
            self._start_step()


def step_schedule(config: NodeConfig) -> StepSchedule:
    """The run's questions per step; ValueError naming the key if the dataset cannot fill a step."""
    questions = load_task_questions(config.pipeline, config.tools).training(config.pipeline)
    return StepSchedule(questions, config.pipeline.queries_per_step, config.run.seed, config.pipeline.shuffle)


def start_controller(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The run's controller (one per run)."""
    started.append(ControllerActor.start_ready(bus, config, timeout_s=120))
