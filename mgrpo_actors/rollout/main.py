"""The main agent's work in the pipeline: the K rollouts of several queries at once, scored, as wire
messages (docs/architecture.md §One training step, steps 2-4).

All K·n episodes of n queries run batched on M's engine (rollout/driver.py); delegations go to the
sub-agents over NATS (subtasks.py), tool calls to `reason` on M's own model. Each rollout is
scored where the gold answer is (r_format, r_correct, R_M: rollout/scoring.py) and yields:
- M's trajectory, for the main side's stream only;
- its RewardStats per sub-agent type (scalars and the call ids of that type's trajectories), the only numbers
  that cross sides, each to its type's side;
and each query a QueryDone for the controller.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from mgrpo_actors.agents.episode import EpisodeRecord, ToolCall
from mgrpo_actors.agents.main import main_episode
from mgrpo_actors.agents.single import single_episode
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel, ToolExecutor, run_episodes
from mgrpo_actors.rollout.scoring import score_main
from mgrpo_actors.rollout.subtasks import BusSubtasks
from mgrpo_actors.rollout.wire import failed_trajectory, trajectory_to_wire
from mgrpo_actors.tools.registry import ToolRegistry
from protocols import QueryDone, RewardStats, RolloutRequest, Trajectory

__all__ = ["QueryOutcome", "failed_outcome", "new_attempt", "question_of", "run_main_rollouts"]


@dataclass(frozen=True)
class QueryOutcome:
    """What one attempt at a query publishes."""

    request: RolloutRequest
    attempt: str
    trajectories: list[Trajectory]  # K main trajectories (main side only)
    stats: dict[str, list[RewardStats]]  # per sub-agent type K scalar records (cross to that type's side)
    done: QueryDone  # progress for the controller


def new_attempt() -> str:
    """An id for one attempt at a query (a redelivered request is rolled out again under a new one)."""
    return uuid.uuid4().hex[:12]


def question_of(request: RolloutRequest) -> Question:
    """The question a rollout request carries (gold answer first, then aliases)."""
    return Question(
        id=request.query_id, question=request.question, answer=request.answers[0], aliases=tuple(request.answers[1:])
    )


def _sub_call_ids(record: EpisodeRecord, subtasks: BusSubtasks, sub_type: str) -> list[str]:
    """The wire call ids of this rollout's delegations to `sub_type` whose trajectory is on that type's side, in
    call order."""
    delegated = [
        turn.action.call_id
        for turn in record.turns
        if isinstance(turn.action, ToolCall) and subtasks.delegates.types.get(turn.action.name) == sub_type
    ]
    answered = [subtasks.answered[call_id] for call_id in delegated if call_id in subtasks.answered]
    return [a.wire_call_id for a in answered if a.has_trajectory]


def _query_outcome(
    request: RolloutRequest,
    attempt: str,
    records: list[EpisodeRecord],
    cfg: RolloutConfig,
    subtasks: BusSubtasks | None,
    seconds: float,
    node: str,
) -> QueryOutcome:
    scores = score_main(records, question_of(request), cfg.main.max_turns, cfg.rewards, cfg.correct)
    ids = {"run_id": request.run_id, "step": request.step, "query_id": request.query_id}
    sub_types = list(dict.fromkeys(subtasks.delegates.types.values())) if subtasks is not None else []
    trajectories, stats = [], {sub_type: [] for sub_type in sub_types}  # the single agent: no sub side, no stats
    for k, (record, score) in enumerate(zip(records, scores, strict=True)):
        trajectories.append(
            trajectory_to_wire(
                record.trajectory,
                cfg.main,
                **ids,
                side="main",
                rollout_index=k,
                call_id="",
                attempt=attempt,
                format_ok=score.format.ok,
                format_error=score.format.reason,
                answer=record.answer,
                r_format=score.r_format,
                r_correct=score.r_correct,
            )
        )
        for sub_type in sub_types:  # R_M and r_correct(M) are shared; the calls are the type's own
            assert subtasks is not None
            calls = _sub_call_ids(record, subtasks, sub_type)
            stats[sub_type].append(
                RewardStats(
                    **ids,
                    rollout_index=k,
                    reward_main=score.reward,
                    r_format=score.r_format,
                    r_correct=score.r_correct,
                    num_sub_calls=len(calls),
                    sub_call_ids=calls,
                    attempt=attempt,
                )
            )
    done = QueryDone(
        **ids,
        attempt=attempt,
        num_rollouts=len(records),
        sub_calls=sum(s.num_sub_calls for per_type in stats.values() for s in per_type),
        seconds=seconds,
        node=node,
        correct_rollouts=sum(s.r_correct >= 1.0 for s in scores),  # full credit from the judge
        reward_mean=sum(s.reward for s in scores) / len(scores) if scores else 0.0,
    )
    return QueryOutcome(request, attempt, trajectories, stats, done)


def failed_outcome(
    request: RolloutRequest, attempt: str, error: str, node: str, sub_types: Sequence[str]
) -> QueryOutcome:
    """Every rollout of the query recorded as failed: reward 0, weight 0, counted (never dropped silently), and
    so reported to each of `sub_types` (none for the single agent)."""
    ids = {"run_id": request.run_id, "step": request.step, "query_id": request.query_id}
    trajectories = [
        failed_trajectory(error, **ids, side="main", rollout_index=k, call_id="", attempt=attempt)
        for k in range(request.num_rollouts)
    ]
    stats = {
        sub_type: [
            RewardStats(
                **ids,
                rollout_index=k,
                reward_main=0.0,
                r_format=0.0,
                r_correct=0.0,
                num_sub_calls=0,
                sub_call_ids=[],
                attempt=attempt,
                failed=True,
            )
            for k in range(request.num_rollouts)
        ]
        for sub_type in sub_types
    }
    done = QueryDone(
        **ids, attempt=attempt, num_rollouts=request.num_rollouts, failed_rollouts=request.num_rollouts, node=node
    )
    return QueryOutcome(request, attempt, trajectories, stats, done)


def run_main_rollouts(
    requests: Sequence[RolloutRequest],
    model: AgentModel,
    tools: ToolRegistry,
    cfg: RolloutConfig,
    subtasks: BusSubtasks | None,
    execute_tools: ToolExecutor,
    seed: int | None,
    node: str = "",
) -> list[QueryOutcome]:
    """Roll every request out K times in one batch; M's call ids are "<attempt>.r<k>.t<n>".

    `subtasks` None: the single-agent baseline (docs/method.md §Training schedule): the agent's episodes are
    single_episode's (every tool in `tools`, no delegation), scored and published exactly like M's.
    """
    started = time.perf_counter()
    attempts = {new_attempt(): request for request in requests}
    episode = main_episode if subtasks is not None else single_episode
    if subtasks is not None:
        subtasks.requests, subtasks.answered = attempts, {}
    delegates = {"delegates": subtasks.delegates} if subtasks is not None else {}
    episodes = {
        attempt: [
            episode(request.question, model.tokenizer, tools, cfg.main, k, episode_id=f"{attempt}.r{k}", **delegates)
            for k in range(request.num_rollouts)
        ]
        for attempt, request in attempts.items()
    }
    run_episodes(
        [e for batch in episodes.values() for e in batch],
        model.engine,
        execute_tools,
        delegate=subtasks,
        seed=seed,
        **delegates,
    )
    seconds = time.perf_counter() - started
    return [
        _query_outcome(request, attempt, [e.record() for e in episodes[attempt]], cfg, subtasks, seconds, node)
        for attempt, request in attempts.items()
    ]
