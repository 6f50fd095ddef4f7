"""The sub-agent's work in the pipeline: a batch of subtasks of one sub-agent type as episodes on that type's
engine, each giving its trajectory (for the type's side's stream only) and the SubtaskResult M reads
(docs/architecture.md §One training step, step 3). Tool calls go to the tool actors over NATS (tool_calls.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mgrpo_actors.agents.delegation import DelegationRequest
from mgrpo_actors.agents.episode import AgentEpisode, ContextBudgetError
from mgrpo_actors.agents.sub import SUB_TOOLS, sub_episode, subtask_result
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.rollout.driver import AgentModel, ToolExecutor, run_episodes
from mgrpo_actors.rollout.scoring import format_check
from mgrpo_actors.rollout.subtasks import attempt_of
from mgrpo_actors.rollout.wire import trajectory_to_wire
from mgrpo_actors.tools.registry import ToolRegistry
from protocols import DEFAULT_SUB_TYPE, SubtaskRequest, SubtaskResult, Trajectory

__all__ = ["SubtaskOutcome", "run_subtasks"]


@dataclass(frozen=True)
class SubtaskOutcome:
    """One subtask: S's trajectory (None when S never ran) and M's answer."""

    request: SubtaskRequest
    trajectory: Trajectory | None
    result: SubtaskResult


def run_subtasks(
    requests: Sequence[SubtaskRequest],
    model: AgentModel,
    tools: ToolRegistry,
    cfg: AgentConfig,
    execute_tools: ToolExecutor,
    seed: int | None,
    sub_type: str = DEFAULT_SUB_TYPE,
    tool_names: Sequence[str] = SUB_TOOLS,
) -> list[SubtaskOutcome]:
    """Run every subtask of sub-agent type `sub_type` (calling `tool_names`) as one of a batch of episodes;
    outcomes in request order."""
    outcomes: dict[int, SubtaskOutcome] = {}
    started: list[tuple[int, AgentEpisode]] = []
    for i, request in enumerate(requests):
        delegation = DelegationRequest(
            task=request.task,
            context=request.context,
            rollout_index=request.rollout_index,
            call_id=request.call_id,
            sub_type=sub_type,
        )
        try:
            started.append((i, sub_episode(delegation, model.tokenizer, tools, cfg, tool_names)))
        except ContextBudgetError as exc:  # M wrote more than S can read: S never runs, M is told why
            result = SubtaskResult(call_id=request.call_id, ok=False, findings="", error=str(exc), has_trajectory=False)
            outcomes[i] = SubtaskOutcome(request, None, result)
    run_episodes([episode for _, episode in started], model.engine, execute_tools, delegate=None, seed=seed)
    for i, episode in started:
        request, record = requests[i], episode.record()
        result = subtask_result(record)
        check = format_check(record, cfg.max_turns)
        trajectory = trajectory_to_wire(
            record.trajectory,
            cfg,
            run_id=request.run_id,
            side=sub_type,
            step=request.step,
            query_id=request.query_id,
            rollout_index=request.rollout_index,
            call_id=request.call_id,
            attempt=attempt_of(request.call_id),
            format_ok=check.ok,
            format_error=check.reason,
            task=request.task,
            context=request.context,
            findings=result.findings,
            result_ok=result.ok,
        )
        outcomes[i] = SubtaskOutcome(request, trajectory, result)
    return [outcomes[i] for i in range(len(requests))]
