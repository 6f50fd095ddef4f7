"""`LocalSubAgents`: the in-process `Delegate`. Each batch of M's delegations becomes a batch of sub-agent
episodes run together on the sub engine; their trajectories stay here (on "the sub side"), only their
structured results go back to M."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mgrpo_actors.agents.delegation import DelegationRequest
from mgrpo_actors.agents.episode import AgentEpisode, ContextBudgetError, EpisodeRecord
from mgrpo_actors.agents.sub import sub_episode, subtask_result
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.rollout.driver import AgentModel, DriverStats, ToolExecutor, run_episodes, step_seed
from mgrpo_actors.tools.registry import ToolRegistry
from protocols.messages import SubtaskResult

__all__ = ["LocalSubAgents", "SubCall"]


@dataclass(frozen=True)
class SubCall:
    """One invocation of S: M's request, S's episode and what M got back."""

    request: DelegationRequest
    episode: EpisodeRecord
    result: SubtaskResult


class LocalSubAgents:
    """A Delegate that runs sub-agent episodes locally and keeps every call that ran in `calls`."""

    def __init__(
        self, model: AgentModel, tools: ToolRegistry, execute_tools: ToolExecutor, cfg: AgentConfig, seed: int | None
    ) -> None:
        """tools: the registry S's prompt lists (its search/visit); execute_tools runs S's calls."""
        self.model = model
        self.tools = tools
        self.execute_tools = execute_tools
        self.cfg = cfg
        self.seed = seed
        self.calls: list[SubCall] = []
        self.stats = DriverStats()
        self._batches = 0

    def __call__(self, requests: Sequence[DelegationRequest]) -> list[SubtaskResult]:
        results: dict[str, SubtaskResult] = {}
        started: list[tuple[DelegationRequest, AgentEpisode]] = []
        for request in requests:
            try:
                started.append((request, sub_episode(request, self.model.tokenizer, self.tools, self.cfg)))
            except ContextBudgetError as exc:  # M wrote more than S can read: S never runs, M is told why
                results[request.call_id] = SubtaskResult(call_id=request.call_id, ok=False, findings="", error=str(exc))
        seed = step_seed(self.seed, self._batches)
        self._batches += 1
        episodes = [episode for _, episode in started]
        self.stats.add(run_episodes(episodes, self.model.engine, self.execute_tools, delegate=None, seed=seed))
        for request, episode in started:
            record = episode.record()
            results[request.call_id] = subtask_result(record)
            self.calls.append(SubCall(request, record, results[request.call_id]))
        return [results[request.call_id] for request in requests]
