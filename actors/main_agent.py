"""Main-agent actors: take rollout requests off the JetStream work queue (every main-agent process
shares the durable consumer `main-agents`), roll each query out K times on M's own engine, delegate
to sub-agents and call tools by request/reply, and publish M's trajectories (main side), the scalar
RewardStats (to the sub side) and progress (docs/architecture.md §One training step, steps 2 and 4). Under
`run.method: single-agent` the same actor is the single agent: every tool (search and visit on the
tool actors) or those of `agents.main.tools` (none: plain GRPO), no delegation.

Requests that arrive while a batch runs wait in the mailbox and go together into the next batch (up
to `pipeline.main_queries_in_flight`), so their rollouts generate batched. A request is acked only
after everything it produced is stored in its streams; a batch that fails is retried (nak) and after
`pipeline.call_retries` retries recorded as failed rollouts (reward 0, weight 0, counted).
"""

from __future__ import annotations

import traceback
from typing import Any

from actors.agent import AgentActor
from mgrpo_actors.agents.main import main_tools
from mgrpo_actors.agents.setup import main_delegates, reason_tool, rollout_config
from mgrpo_actors.agents.single import single_tool_names, single_tools
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring.publish import publish_event, publish_metrics
from mgrpo_actors.rollout.driver import ToolExecutor, registry_executor
from mgrpo_actors.rollout.main import QueryOutcome, failed_outcome, new_attempt, run_main_rollouts
from mgrpo_actors.rollout.subtasks import BusSubtasks
from mgrpo_actors.rollout.tool_calls import bus_tool_executor
from mgrpo_actors.runtime import Bus, BusError, Delivery
from mgrpo_actors.runtime.crossing import resend_later
from mgrpo_actors.tools.registry import ToolRegistry
from mgrpo_actors.tools.setup import build_tool_registry
from protocols import RolloutRequest, WeightsVersion

__all__ = ["MainAgentActor", "start_main_agents"]


class MainAgentActor(AgentActor):
    """M on its engine; one actor per main-agent process."""

    role = "main-agent"
    side = "main"

    def __init__(self, bus: Bus, config: NodeConfig) -> None:
        super().__init__(bus, config, batch_size=config.pipeline.main_queries_in_flight)

    def handlers(self) -> dict:
        return {RolloutRequest: self.on_request, WeightsVersion: self.on_weights}

    def on_start(self) -> None:
        super().on_start()
        self.start_engine()
        self.rollout_cfg = rollout_config(self.config.agents, self.config.algo)
        registry = ToolRegistry()
        registry.register(reason_tool(self.model, self.config.agents.main.max_new_tokens_per_turn))
        # each sub-agent type's policy version this batch's requests name (its sub-agents load it before answering)
        self.sub_versions: dict[str, int] = {}
        self.sub_types = self.config.sides[1:]  # none for the single agent
        if self.sub_types:
            self.tools = main_tools(registry)
            self.execute_tools = registry_executor(self.tools)
            self.subtasks: BusSubtasks | None = BusSubtasks(
                self.bus,
                self.pipeline.subtask_timeout_s,
                self.pipeline.call_retries,
                self.calls,
                sub_versions=lambda: self.sub_versions,
                delegates=main_delegates(self.config),
            )
        else:  # the single-agent baseline
            self.tools, self.execute_tools = self._single_agent_tools(registry)
            self.subtasks = None
        spec = self.bus.durables["main-agents"]
        self.consume(
            *spec.where(self.bus.subjects),
            batch=self.pipeline.main_queries_in_flight,
            max_ack_pending=spec.max_ack_pending,
            ack_wait_s=self.pipeline.ack_wait_s,
        )

    def _single_agent_tools(self, registry: ToolRegistry) -> tuple[ToolRegistry, ToolExecutor]:
        """The single agent's tools (agents.main.tools; none: plain GRPO): search and visit go to the tool
        actors (built here only for their schemas in the prompt), `reason` (already in `registry`) runs on
        this actor's model."""
        names = single_tool_names(self.config.agents.main)
        remote = [name for name in names if name != "reason"]
        served = build_tool_registry(self.config.tools, names=remote)
        for name in remote:
            registry.register(served.get(name), name)
        pipeline = self.pipeline
        execute = bus_tool_executor(
            self.bus,
            remote,
            local=registry_executor(registry),
            timeout_s=pipeline.tool_timeout_s,
            caller=self.name,
            retries=pipeline.call_retries,
            stats=self.calls,
        )
        return single_tools(registry, names), execute

    def run_batch(self, batch: list[tuple[RolloutRequest, Delivery]]) -> None:
        batch = [(request, delivery) for request, delivery in batch if self._of_this_run(request, delivery)]
        if not batch:
            return
        try:  # sync mode: the requests name the version they are to be rolled out with
            self.policy.ensure(max(r.main_version for r, _ in batch))
        except BusError as exc:
            for _, delivery in batch:
                self.hand_back(delivery, str(exc))
            return
        self.sub_versions = {t: max(r.sub_versions.get(t, 0) for r, _ in batch) for t in self.sub_types}
        seed = self.batch_seed(batch[0][0].step)
        try:
            outcomes = run_main_rollouts(
                [r for r, _ in batch],
                self.model,
                self.tools,
                self.rollout_cfg,
                self.subtasks,
                self.execute_tools,
                seed,
                self.bus.node,
            )
        except Exception as exc:
            self._failed(batch, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=3))
            return
        self._publish(outcomes, [delivery for _, delivery in batch])
        publish_metrics(
            self.bus, "main_agent", {**self.calls.take(), "queries": len(batch)}, batch[0][0].step, self.role
        )

    def _of_this_run(self, request: RolloutRequest, delivery: Delivery) -> bool:
        """Whether the request names this node's sub-agent types. One from a controller with other types means this
        node's config is not the run's: the request goes back (a main agent with the run's config rolls it out) and
        this node stops, saying why (exit 3), rather than roll out against types that are not there."""
        if set(request.sub_versions) == set(self.sub_types):
            return True
        if not self.sub_types and request.sub_versions == {"sub": 0}:
            return True  # an earlier version's single-agent request (schema 1 named a sub version even there)
        named, own = ", ".join(request.sub_versions) or "none", ", ".join(self.sub_types) or "none"
        why = f"the run's requests name sub-agent types {named}; this node's config has {own}"
        self.hand_back(delivery, why)
        publish_event(self.bus, "main_agent.config_mismatch", why, self.role, level="error", step=request.step)
        self.bus.stop_run(why)
        return False

    def _failed(self, batch: list[tuple[RolloutRequest, Delivery]], error: str, where: str) -> None:
        """Retry the batch's requests (JetStream redelivers them, maybe elsewhere); record them failed when out of
        retries."""
        self.log.error("rollout batch failed", error=error, where=where, queries=len(batch))
        for request, delivery in batch:
            if delivery.num_delivered <= self.pipeline.call_retries:
                delivery.nak(delay_s=1.0)
            else:
                outcome = failed_outcome(request, new_attempt(), error, self.bus.node, self.sub_types)
                self._publish([outcome], [delivery])
        publish_metrics(self.bus, "main_agent", {"failed_batches": 1.0}, batch[0][0].step, self.role)

    def _publish(self, outcomes: list[QueryOutcome], deliveries: list[Delivery]) -> None:
        """Store each outcome's trajectories, then its reward statistics (each kind for all outcomes in one round
        trip), then report it done and ack its request; an outcome not wholly stored hands its request back (rolled
        out again under a new attempt; the aligners keep the first complete attempt of each rollout)."""
        subjects = self.bus.subjects
        subject = subjects.trajectories("main")
        failed = self._store([[(subject, t, None) for t in outcome.trajectories] for outcome in outcomes])
        stats = [
            [  # they cross into the type's side (deploy/accounts.py); only an outcome whose trajectories are stored
                (subjects.reward_stats_of(sub_type), s, f"stats-{s.step}-{s.query_id}-{s.rollout_index}-{s.attempt}")
                for sub_type, per_type in outcome.stats.items()
                for s in per_type
            ]
            if why is None
            else []
            for outcome, why in zip(outcomes, failed, strict=True)
        ]
        failed = [why or later for why, later in zip(failed, self._store(stats), strict=True)]
        for outcome, delivery, why, mine in zip(outcomes, deliveries, failed, stats, strict=True):
            if why is not None:
                self.hand_back(delivery, f"outcome not stored: {why}")
                continue
            try:
                for stats_subject, message, msg_id in mine:  # what publish_crossing does after its publish
                    resend_later(self.bus, stats_subject, message, msg_id)
                self.bus.publish(subjects.query_done, outcome.done)
            except Exception as exc:
                self.hand_back(delivery, f"outcome not reported: {type(exc).__name__}: {exc}")
                continue
            delivery.ack()

    def _store(self, per_outcome: list[list[tuple[str, Any, str | None]]]) -> list[str | None]:
        """Publish every outcome's items into their streams together; per outcome why one was not stored (None:
        all were)."""
        flat = [item for items in per_outcome for item in items]
        if not flat:
            return [None] * len(per_outcome)
        try:
            results: list[int | Exception] = self.bus.js_publish_many(flat)
        except Exception as exc:  # the bus itself failed: nothing is known stored
            results = [exc] * len(flat)
        failed, at = [], 0
        for items in per_outcome:
            error = next((r for r in results[at : at + len(items)] if isinstance(r, Exception)), None)
            failed.append(None if error is None else f"{type(error).__name__}: {error}")
            at += len(items)
        return failed


def start_main_agents(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """One main-agent actor (its model) per process; start more processes for more rollout throughput."""
    started.append(MainAgentActor.start_ready(bus, config, timeout_s=600))
