"""Sub-agent actors: answer M's subtask requests to one sub-agent type (queue group `<type>-agents`, request/reply),
each as a sub-agent episode on the type's own engine with its tools (search and visit for the default type) served
by the tool actors over NATS; publish the trajectory to the type's side's stream only, then reply to M with the
SubtaskResult (findings and evidence, never the transcript) (docs/architecture.md §One training step, step 3).

Requests that arrive while a batch runs wait in the mailbox and go together into the next batch (up
to `pipeline.sub_batch`), so their episodes generate batched.
"""

from __future__ import annotations

import traceback
from typing import Any

from actors.agent import AgentActor
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring.publish import publish_metrics
from mgrpo_actors.rollout.sub import SubtaskOutcome, run_subtasks
from mgrpo_actors.rollout.tool_calls import bus_tool_executor
from mgrpo_actors.runtime import Bus, BusError, Delivery
from mgrpo_actors.tools.setup import build_tool_registry
from protocols import DEFAULT_SUB_TYPE, Failure, SubtaskRequest, WeightsVersion

__all__ = ["SubAgentActor", "start_sub_agents"]


class SubAgentActor(AgentActor):
    """A sub-agent type's agent on its engine; one actor per type per sub-agent process."""

    role = "sub-agent"

    def __init__(self, bus: Bus, config: NodeConfig, sub_type: str = DEFAULT_SUB_TYPE) -> None:
        self.side = sub_type  # type: ignore[misc]  # this actor's side: its sub-agent type
        name = None if sub_type == DEFAULT_SUB_TYPE else f"{self.role}-{sub_type}-{bus.node}"
        super().__init__(bus, config, batch_size=config.pipeline.sub_batch, name=name)
        self.tool_names = config.sub_tools(sub_type)
        # metrics of another type than the default say which (the default type's keep the tags they had)
        self.type_tag = None if sub_type == DEFAULT_SUB_TYPE else {"sub_type": sub_type}

    def handlers(self) -> dict:
        return {SubtaskRequest: self.on_request, WeightsVersion: self.on_weights}

    def on_start(self) -> None:
        super().on_start()
        self.start_engine()
        # The prompt lists the type's tools with their schemas; the calls themselves go to tool actors.
        self.tools = build_tool_registry(self.config.tools, names=list(self.tool_names))
        pipeline = self.pipeline
        self.execute_tools = bus_tool_executor(
            self.bus,
            self.tool_names,
            timeout_s=pipeline.tool_timeout_s,
            caller=self.name,
            retries=pipeline.call_retries,
            stats=self.calls,
        )
        self.listen(self.bus.subjects.subtask_requests_of(self.side), queue=f"{self.side}-agents")

    def run_batch(self, batch: list[tuple[SubtaskRequest, Delivery]]) -> None:
        try:  # sync mode: M names the sub policy version the step is rolled out with
            self.policy.ensure(max(r.sub_version for r, _ in batch))
        except BusError as exc:
            for _, delivery in batch:
                self._fail(delivery, str(exc))  # retryable: M asks again (maybe another sub-agent)
            return
        seed = self.batch_seed(batch[0][0].step)
        try:
            outcomes = run_subtasks(
                [r for r, _ in batch],
                self.model,
                self.tools,
                self.config.agent(self.side),
                self.execute_tools,
                seed,
                self.side,
                self.tool_names,
            )
        except Exception as exc:
            self.log.error(
                "subtask batch failed", error=f"{type(exc).__name__}: {exc}", where=traceback.format_exc(limit=3)
            )
            for _, delivery in batch:  # M retries on another instance, then records the call as failed
                self._fail(delivery, f"{type(exc).__name__}: {exc}")
            return
        stored = self._store_trajectories(outcomes)
        for outcome, stored_as, (_, delivery) in zip(outcomes, stored, batch, strict=True):
            if isinstance(stored_as, Exception):  # not stored: M must not count this call (it retries elsewhere)
                self._fail(delivery, f"trajectory not stored: {type(stored_as).__name__}: {stored_as}")
            elif delivery.reply:
                self.bus.publish(delivery.reply, outcome.result)
        figures = {**self.calls.take(), "subtasks": len(batch)}
        publish_metrics(self.bus, "sub_agent", figures, batch[0][0].step, self.role, tags=self.type_tag)

    def _store_trajectories(self, outcomes: list[SubtaskOutcome]) -> list[int | Exception | None]:
        """Each outcome's trajectory stored on the sub side before M hears of it, all in one round trip: per
        outcome its stream sequence, the exception that kept it out, or None (no trajectory)."""
        subject = self.bus.subjects.trajectories(self.side)
        which = [i for i, outcome in enumerate(outcomes) if outcome.trajectory is not None]
        stored: list[int | Exception | None] = [None] * len(outcomes)
        try:
            results = self.bus.js_publish_many([(subject, outcomes[i].trajectory, None) for i in which])
        except Exception as exc:  # the bus itself failed: none is known stored
            results = [exc] * len(which)
        for i, result in zip(which, results, strict=True):
            stored[i] = result
        return stored

    def _fail(self, delivery: Delivery, reason: str) -> None:
        if delivery.reply:
            self.bus.publish(delivery.reply, Failure(subject=delivery.subject, reason=reason, error_type="BatchFailed"))


def start_sub_agents(bus: Bus, config: NodeConfig, started: list[Any], sub_type: str = DEFAULT_SUB_TYPE) -> None:
    """One sub-agent actor (its model) of `sub_type` per process; start more processes for more subtask
    throughput."""
    started.append(SubAgentActor.start_ready(bus, config, sub_type, timeout_s=600))
