"""`run_rollouts`: K rollouts of one question by M and its sub-agents, run and scored locally.

M's K episodes run batched on the main engine (driver.py); whenever some of them delegate, the
delegations run batched as sub-agent episodes on the sub engine (local_subagents.py). Each rollout
records M's trajectory and answer, its sub calls (call id, S's trajectory, S's result) and its scores
(scoring.py). Every trajectory carries the policy version of the weights that sampled it.
`run_single_agent_rollouts` is the single-agent baseline: one agent with every tool, scored like M.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mgrpo_actors.agents.episode import AgentEpisode, EpisodeRecord
from mgrpo_actors.agents.main import main_episode
from mgrpo_actors.agents.single import single_episode
from mgrpo_actors.algo.rewards import SubRewardWeights, main_correct_for_sub
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.log import get_logger
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import (
    AgentModel,
    DriverStats,
    ToolExecutor,
    registry_executor,
    run_episodes,
    step_seed,
)
from mgrpo_actors.rollout.local_subagents import LocalSubAgents, SubCall
from mgrpo_actors.rollout.scoring import MainScore, SubScore, expert_for, score_main, score_sub
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = [
    "Rollout",
    "RolloutConfig",
    "RolloutGroup",
    "run_rollout_groups",
    "run_rollouts",
    "run_single_agent_groups",
    "run_single_agent_rollouts",
]

log = get_logger("mgrpo.agents.rollout")


@dataclass(frozen=True)
class Rollout:
    """Rollout k of a question: M's episode, its sub calls in call order, and their scores."""

    index: int  # k
    main: EpisodeRecord  # M's episode (the single agent's in single-agent mode)
    main_score: MainScore  # R_M and its parts
    sub_calls: tuple[SubCall, ...]  # d_k invocations of S (empty in single-agent mode)
    sub_scores: tuple[SubScore, ...]  # R_S and its parts, one per sub call


@dataclass(frozen=True)
class RolloutGroup:
    """The K rollouts of one question."""

    question: Question
    rollouts: tuple[Rollout, ...]
    sub_weights: SubRewardWeights | None  # β as used for R_S; None in single-agent mode
    main_stats: DriverStats  # M's (or the single agent's) generation and tool time
    sub_stats: DriverStats  # S's, summed over every delegation batch
    seconds: float  # wall time of the whole group


def run_rollouts(
    question: Question,
    k: int,
    main: AgentModel,
    sub: AgentModel,
    tools: ToolRegistry,
    cfg: RolloutConfig,
    seed: int | None = None,
    execute_tools: ToolExecutor | None = None,
) -> RolloutGroup:
    """K rollouts of `question` by M (`main`) delegating to S (`sub`); `tools` holds reason, search and visit.

    `execute_tools` runs the agents' tool calls (default: `tools` in this process; the pipeline passes
    one that sends them to tool actors over NATS).
    """
    return run_rollout_groups([question], k, main, sub, tools, cfg, seed, execute_tools)[0]


def run_rollout_groups(
    questions: Sequence[Question],
    k: int,
    main: AgentModel,
    sub: AgentModel,
    tools: ToolRegistry,
    cfg: RolloutConfig,
    seed: int | None = None,
    execute_tools: ToolExecutor | None = None,
) -> list[RolloutGroup]:
    """K rollouts of each question, all generated as one batch on M's engine (and S's delegations as
    batches on S's); one RolloutGroup per question, in order. With several questions, episode ids are
    "q<i>.r<k>" (call ids "q<i>.r<k>.t<n>"); with one, "r<k>". Sampling draws from one stream for the
    whole batch, so a question's rollouts depend on which others share its batch. Every group carries
    the whole batch's DriverStats and seconds (do not sum them over the groups of one batch)."""
    started = time.perf_counter()
    execute_tools = execute_tools or registry_executor(tools)
    sub_agents = LocalSubAgents(sub, tools, execute_tools, cfg.sub, seed=step_seed(seed, 1))
    prefix, episodes = _question_episodes(main_episode, questions, k, main, tools, cfg)
    main_stats = run_episodes(
        [e for batch in episodes for e in batch],
        main.engine,
        execute_tools,
        delegate=sub_agents,
        seed=step_seed(seed, 0),
    )
    seconds = time.perf_counter() - started
    groups = []
    for i, question in enumerate(questions):
        calls = [call for call in sub_agents.calls if call.request.call_id.startswith(f"{prefix[i]}r")]
        groups.append(
            _scored_group(
                question, [e.record() for e in episodes[i]], calls, cfg, main_stats, sub_agents.stats, seconds
            )
        )
    return groups


def _question_episodes(
    make: Callable[..., AgentEpisode],
    questions: Sequence[Question],
    k: int,
    model: AgentModel,
    tools: ToolRegistry,
    cfg: RolloutConfig,
) -> tuple[list[str], list[list[AgentEpisode]]]:
    """K episodes per question by `make` (main_episode or single_episode), ids "<prefix>r<k>" with the
    prefix "q<i>." when there are several questions (so their call ids stay apart), "" for one."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    prefix = [f"q{i}." if len(questions) > 1 else "" for i in range(len(questions))]
    episodes = [
        [
            make(q.question, model.tokenizer, tools, cfg.main, index, episode_id=f"{prefix[i]}r{index}")
            for index in range(k)
        ]
        for i, q in enumerate(questions)
    ]
    return prefix, episodes


def _scored_group(
    question: Question,
    records: list[EpisodeRecord],
    calls: list[SubCall],
    cfg: RolloutConfig,
    main_stats: DriverStats,
    sub_stats: DriverStats,
    seconds: float,
) -> RolloutGroup:
    """One question's rollouts scored (docs/method.md §Rewards); `calls` are its sub calls in call order."""
    expert, weights = expert_for(question, cfg)
    main_scores = score_main(records, question, cfg.main.max_turns, cfg.rewards, cfg.correct)
    calls = sorted(calls, key=lambda call: call.request.rollout_index)  # stable: call order kept
    # docs/method.md §Rewards: r_correct(M) in R_S is 0 when M's format is invalid
    main_correct = main_correct_for_sub([m.format.ok for m in main_scores], [m.r_correct for m in main_scores])[
        [call.request.rollout_index for call in calls]
    ]
    sub_scores = score_sub(calls, main_correct, expert, weights, cfg.sub.max_turns)
    rollouts = tuple(
        Rollout(
            index=index,
            main=record,
            main_score=main_scores[index],
            sub_calls=tuple(call for call in calls if call.request.rollout_index == index),
            sub_scores=tuple(
                s for call, s in zip(calls, sub_scores, strict=True) if call.request.rollout_index == index
            ),
        )
        for index, record in enumerate(records)
    )
    log.info("rollouts_done", question=question.id, k=len(records), sub_calls=len(calls), seconds=round(seconds, 2))
    return RolloutGroup(question, rollouts, weights, main_stats, sub_stats, seconds)


def run_single_agent_rollouts(
    question: Question,
    k: int,
    model: AgentModel,
    tools: ToolRegistry,
    cfg: RolloutConfig,
    seed: int | None = None,
    execute_tools: ToolExecutor | None = None,
) -> RolloutGroup:
    """K rollouts of `question` by the single agent (budgets cfg.main), scored like M."""
    return run_single_agent_groups([question], k, model, tools, cfg, seed, execute_tools)[0]


def run_single_agent_groups(
    questions: Sequence[Question],
    k: int,
    model: AgentModel,
    tools: ToolRegistry,
    cfg: RolloutConfig,
    seed: int | None = None,
    execute_tools: ToolExecutor | None = None,
) -> list[RolloutGroup]:
    """K rollouts of each question by the single agent, generated as one batch (as run_rollout_groups)."""
    started = time.perf_counter()
    _, episodes = _question_episodes(single_episode, questions, k, model, tools, cfg)
    stats = run_episodes(
        [e for batch in episodes for e in batch],
        model.engine,
        execute_tools or registry_executor(tools),
        delegate=None,
        seed=step_seed(seed, 0),
    )
    seconds = time.perf_counter() - started
    groups = []
    for question, batch in zip(questions, episodes, strict=True):
        records = [episode.record() for episode in batch]
        scores = score_main(records, question, cfg.main.max_turns, cfg.rewards, cfg.correct)
        rollouts = tuple(Rollout(index, record, scores[index], (), ()) for index, record in enumerate(records))
        groups.append(RolloutGroup(question, rollouts, None, stats, DriverStats(), seconds))
    return groups
