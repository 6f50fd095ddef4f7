"""Sub-agent actors: answer M's subtask requests (queue group `sub-agents`, request/reply), each as a
sub-agent episode on S's own engine with search/visit served by the tool actors over NATS; publish S's
trajectory to the sub side's stream only, then reply to M with the SubtaskResult (findings and
evidence, never the transcript) (design.md §One training step, step 3).

Requests that arrive while a batch runs wait in the mailbox and go together into the next batch (up
to `pipeline.sub_batch`), so their episodes generate batched.
"""

from __future__ import annotations

import tempfile
import traceback
from pathlib import Path
from typing import Any

import torch

from mgrpo_actors.agents.driver import step_seed
from mgrpo_actors.pipeline.schedule import node_seed
from mgrpo_actors.agents.setup import load_agent
from mgrpo_actors.agents.sub_agent import SUB_TOOLS
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.learner.weights import WeightsStore
from mgrpo_actors.pipeline.calls import CallStats
from mgrpo_actors.pipeline.policy_sync import PolicySync
from mgrpo_actors.pipeline.reporting import publish_metrics
from mgrpo_actors.pipeline.sub_rollouts import run_subtasks
from mgrpo_actors.pipeline.tool_client import bus_tool_executor
from mgrpo_actors.runtime import HOLD, Bus, BusActor, BusError, Delivery, PendingBatch, RunBatch
from mgrpo_actors.tools.setup import build_tool_registry
from protocols import Failure, SubtaskRequest, WeightsVersion

__all__ = ["SubAgentActor", "start_sub_agents"]


class SubAgentActor(BusActor):
    """S on its engine; one actor per sub-agent process."""

    role = "sub-agent"

    def __init__(self, bus: Bus, config: NodeConfig) -> None:
        super().__init__(bus, name=f"sub-agent-{bus.node}")
        self.config = config
        self.pipeline = config.pipeline
        self.pending: PendingBatch[tuple[SubtaskRequest, Delivery]] = PendingBatch(self.actor_ref, self.pipeline.sub_batch)
        self.batches = 0
        self.calls = CallStats()

    def handlers(self) -> dict:
        return {SubtaskRequest: self.on_request, WeightsVersion: self.on_weights}

    def on_start(self) -> None:
        super().on_start()
        torch.set_num_threads(self.config.agents.torch_threads)
        self.model = load_agent(self.config.agents.sub)
        # S's prompt lists search and visit with their schemas; the calls themselves go to tool actors.
        self.tools = build_tool_registry(self.config.tools, names=list(SUB_TOOLS))
        pipeline = self.pipeline
        self.execute_tools = bus_tool_executor(self.bus, SUB_TOOLS, timeout_s=pipeline.tool_timeout_s, caller=self.name, retries=pipeline.call_retries, stats=self.calls)
        store = WeightsStore(self.bus, "sub", self.config.learners.weights, Path(tempfile.mkdtemp(prefix="mgrpo-sub-weights-")))
        self.policy = PolicySync(self.bus, "sub", self.model.engine, store)
        self.listen(self.bus.subjects.weights("sub"))
        self.listen(self.bus.subjects.subtask_requests, queue="sub-agents")

    def on_request(self, request: SubtaskRequest, delivery: Delivery) -> Any:
        self.pending.add((request, delivery))
        return HOLD

    def on_note(self, note: Any) -> Any:
        if isinstance(note, RunBatch):
            batch = self.pending.take()
            if batch:
                self._run(batch)
            return None
        return super().on_note(note)

    def on_weights(self, announced: WeightsVersion, delivery: Delivery) -> None:
        self.policy.load(announced)  # between batches: this actor runs one thing at a time

    def _run(self, batch: list[tuple[SubtaskRequest, Delivery]]) -> None:
        try:  # sync mode: M names the sub policy version the step is rolled out with
            self.policy.ensure(max(r.sub_version for r, _ in batch))
        except BusError as exc:
            for _, delivery in batch:
                self._fail(delivery, str(exc))  # retryable: M asks again (maybe another sub-agent)
            return
        # Each process samples its own stream: two sub-agents given the same task must not answer alike.
        seed = step_seed(self.config.run.seed, batch[0][0].step, self.batches, node_seed(self.bus.node))
        self.batches += 1
        try:
            outcomes = run_subtasks([r for r, _ in batch], self.model, self.tools, self.config.agents.sub, self.execute_tools, seed)
        except Exception as exc:
            self.log.error("subtask batch failed", error=f"{type(exc).__name__}: {exc}", where=traceback.format_exc(limit=3))
            for _, delivery in batch:  # M retries on another instance, then records the call as failed
                self._fail(delivery, f"{type(exc).__name__}: {exc}")
            return
        for outcome, (_, delivery) in zip(outcomes, batch, strict=True):
            try:
                if outcome.trajectory is not None:  # stored on the sub side before M hears of it
                    self.bus.js_publish(self.bus.subjects.trajectories("sub"), outcome.trajectory)
            except Exception as exc:  # not stored: M must not count this call (it retries elsewhere)
                self._fail(delivery, f"trajectory not stored: {type(exc).__name__}: {exc}")
                continue
            if delivery.reply:
                self.bus.publish(delivery.reply, outcome.result)
        publish_metrics(self.bus, "sub_agent", {**self.calls.take(), "subtasks": len(batch)}, batch[0][0].step, self.role)


    def _fail(self, delivery: Delivery, reason: str) -> None:
        if delivery.reply:
            self.bus.publish(delivery.reply, Failure(subject=delivery.subject, reason=reason, error_type="BatchFailed"))


def start_sub_agents(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """One sub-agent actor (its model) per process; start more processes for more subtask throughput."""
    started.append(SubAgentActor.start_ready(bus, config, timeout_s=600))
