"""Scores of finished rollouts, m-grpo.md §Rewards, through the algo package (no reward math here):
r_format by `trajectory_format_ok`, M's r_correct by `exact_match` against the gold answers, R_M by
`main_reward`, and for each sub call r_expert by the local rule `contains_reference` and R_S by
`sub_reward`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mgrpo_actors.agents.episode import EpisodeRecord
from mgrpo_actors.agents.local_delegate import SubCall
from mgrpo_actors.algo.config import RewardConfig
from mgrpo_actors.algo.format_check import FormatCheck, r_format, trajectory_format_ok
from mgrpo_actors.algo.rewards import SubRewardWeights, main_reward, sub_reward
from mgrpo_actors.algo.scorers import contains_reference, exact_match, normalize_answer
from mgrpo_actors.envs.qa import Question

__all__ = ["MainScore", "SubScore", "expert_references", "format_check", "score_main", "score_sub"]


@dataclass(frozen=True)
class MainScore:
    """R_M and its parts for one rollout (M's, or the single agent's)."""

    format: FormatCheck  # whether M's trajectory is well formed, and why not
    r_format: float  # 1.0 if well formed, else 0.0
    r_correct: float  # exact match of M's answer with a gold answer (0.0 without an answer)
    reward: float  # R_M = α1·r_format + α2·r_correct if well formed, else 0


@dataclass(frozen=True)
class SubScore:
    """R_S and its parts for one sub call."""

    call_id: str
    format: FormatCheck  # whether S's own trajectory is well formed, and why not
    r_format: float  # 1.0 if well formed, else 0.0
    main_correct: float  # r_correct(M) of the rollout the call belongs to
    r_expert: float | None  # contains_reference(S's findings, expert references); None when β3 is folded
    reward: float  # R_S = β1·r_format(S) + β2·r_correct(M) + β3·r_expert if well formed, else 0


def expert_references(question: Question) -> list[str]:
    """What S's findings are checked for: the facts of the evidence chains and the evidence entities the
    question does not already name (an entity of the question would reward S for repeating its task)."""
    named = f" {normalize_answer(question.question)} "
    entities = [name for name in question.evidence_entities if f" {normalize_answer(name)} " not in named]
    candidates = [chain.fact for chain in question.evidence] + entities
    return list(dict.fromkeys(text for text in candidates if normalize_answer(text)))


def format_check(record: EpisodeRecord, max_turns: int) -> FormatCheck:
    """r_format's check: every turn parsed, within the turn budget, and the episode ended with an answer."""
    return trajectory_format_ok(record.turn_errors, record.answer is not None, require_answer=True, max_turns=max_turns)


def score_main(
    records: Sequence[EpisodeRecord], answers: Sequence[str], max_turns: int, cfg: RewardConfig
) -> list[MainScore]:
    """MainScore of each rollout's main episode; `answers`: the gold answer and its aliases."""
    checks = [format_check(record, max_turns) for record in records]
    correct = [exact_match(r.answer, list(answers)) if r.answer is not None else 0.0 for r in records]
    rewards = main_reward(np.array([c.ok for c in checks], dtype=bool), np.array(correct, dtype=np.float64), cfg)
    return [
        MainScore(format=check, r_format=r_format(check), r_correct=float(c), reward=float(reward))
        for check, c, reward in zip(checks, correct, rewards, strict=True)
    ]


def score_sub(
    calls: Sequence[SubCall],
    main_correct: Sequence[float],
    references: Sequence[str] | None,
    weights: SubRewardWeights,
    max_turns: int,
) -> list[SubScore]:
    """SubScore of each call; main_correct[i] is r_correct(M) of call i's rollout; references are None
    exactly when the weights fold β3 (no expert)."""
    checks = [format_check(call.episode, max_turns) for call in calls]
    ok = np.array([check.ok for check in checks], dtype=bool)
    correct = np.array(main_correct, dtype=np.float64)
    expert = None if references is None else [contains_reference(c.result.findings, list(references)) for c in calls]
    rewards = sub_reward(ok, correct, None if expert is None else np.array(expert, dtype=np.float64), weights)
    return [
        SubScore(
            call_id=call.request.call_id,
            format=check,
            r_format=r_format(check),
            main_correct=float(correct[i]),
            r_expert=None if expert is None else float(expert[i]),
            reward=float(rewards[i]),
        )
        for i, (call, check) in enumerate(zip(calls, checks, strict=True))
    ]
