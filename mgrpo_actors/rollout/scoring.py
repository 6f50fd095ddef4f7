"""Scores of finished rollouts, docs/method.md §Rewards, through the algo package (no reward math here):
r_format by `trajectory_format_ok`, M's r_correct by the `correct` judge against the gold answers, R_M
by `main_reward`, and for each sub call r_expert by the `expert` judge against the expert references
and R_S by `sub_reward`. Judges follow `algo.judge.Judge` (a local rule or an LLM judge); a judge that
fails raises JudgeError unless it was configured with an explicit fallback score.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mgrpo_actors.agents.episode import EpisodeRecord
from mgrpo_actors.algo.config import RewardConfig
from mgrpo_actors.algo.format_check import FormatCheck, r_format, trajectory_format_ok
from mgrpo_actors.algo.judge import Judge
from mgrpo_actors.algo.rewards import SubRewardWeights, main_reward, resolve_sub_weights, sub_reward
from mgrpo_actors.algo.scorers import normalize_answer, subtask_text
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.phases import SCORE, timed
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.local_subagents import SubCall

__all__ = [
    "MainScore",
    "SubCallFacts",
    "SubScore",
    "NO_EVIDENCE",
    "NO_EXPERT",
    "best_score",
    "expert_for",
    "expert_references",
    "format_check",
    "score_main",
    "score_sub",
    "sub_rewards",
]


# docs/method.md §Rewards: resolve β once per configuration and reason (folding β3 logs a warning), not once
# per question.
_sub_weights = functools.cache(resolve_sub_weights)
NO_EXPERT = "no expert judge configured"
NO_EVIDENCE = "questions without evidence (e.g. a plain JSONL benchmark) give the expert judge nothing to check"


@dataclass(frozen=True)
class MainScore:
    """R_M and its parts for one rollout (M's, or the single agent's)."""

    format: FormatCheck  # whether M's trajectory is well formed, and why not
    r_format: float  # 1.0 if well formed, else 0.0
    r_correct: float  # the correct judge's best score of M's answer over the gold answers (0.0 without one)
    reward: float  # R_M = α1·r_format + α2·r_correct if well formed, else 0


@dataclass(frozen=True)
class SubScore:
    """R_S and its parts for one sub call."""

    call_id: str
    format: FormatCheck  # whether S's own trajectory is well formed, and why not
    r_format: float  # 1.0 if well formed, else 0.0
    main_correct: float  # r_correct(M) of the call's rollout, 0 if M's format was invalid (algo main_correct_for_sub)
    r_expert: float | None  # the expert judge's best score of S's findings over the references; None: β3 folded
    reward: float  # R_S = β1·r_format(S) + β2·r_correct(M) + β3·r_expert if well formed, else 0


def expert_references(question: Question) -> list[str]:
    """What S's findings are checked for: the facts of the evidence chains and the evidence entities the
    question does not already name (an entity of the question would reward S for repeating its task)."""
    named = f" {normalize_answer(question.question)} "
    entities = [name for name in question.evidence_entities if f" {normalize_answer(name)} " not in named]
    candidates = [chain.fact for chain in question.evidence] + entities
    return list(dict.fromkeys(text for text in candidates if normalize_answer(text)))


def expert_for(question: Question, cfg: RolloutConfig) -> tuple[tuple[Judge, list[str]] | None, SubRewardWeights]:
    """The expert judge with its references for `question`, and the β weights that go with it.

    A question without evidence folds β3 into β2 for that question only; the log says so once.
    """
    if cfg.expert is None:
        return None, _sub_weights(cfg.rewards, False, NO_EXPERT)
    references = expert_references(question)
    if not references:
        return None, _sub_weights(cfg.rewards, False, NO_EVIDENCE)
    return (cfg.expert, references), _sub_weights(cfg.rewards, True)


def best_score(judge: Judge, question: str, response: str, references: Sequence[str]) -> float:
    """The judge's best score of `response` over `references` (a gold answer and its aliases, or the expert
    references), asking no further once one scores 1."""
    if not references:
        raise ValueError(f"judge {judge.name!r} needs at least one reference to score against")
    best = 0.0
    for reference in references:
        best = max(best, judge.score(question, response, reference).score)
        if best >= 1.0:
            break
    return best


def format_check(record: EpisodeRecord, max_turns: int) -> FormatCheck:
    """r_format's check: every turn parsed, within the turn budget, and the episode ended with an answer."""
    return trajectory_format_ok(record.turn_errors, record.answer is not None, require_answer=True, max_turns=max_turns)


@timed(SCORE)
def score_main(
    records: Sequence[EpisodeRecord], question: Question, max_turns: int, cfg: RewardConfig, judge: Judge
) -> list[MainScore]:
    """MainScore of each rollout's main episode: `judge` scores its answer against the question's answers."""
    checks = [format_check(record, max_turns) for record in records]
    correct = [
        best_score(judge, question.question, r.answer, question.answers) if r.answer is not None else 0.0
        for r in records
    ]
    rewards = main_reward(np.array([c.ok for c in checks], dtype=bool), np.array(correct, dtype=np.float64), cfg)
    return [
        MainScore(format=check, r_format=r_format(check), r_correct=float(c), reward=float(reward))
        for check, c, reward in zip(checks, correct, rewards, strict=True)
    ]


@dataclass(frozen=True)
class SubCallFacts:
    """What R_S reads of one sub call (docs/method.md §Rewards), wherever the call is: a local SubCall
    (score_sub) or a trajectory on the sub side with the RewardStats of its rollout (the sub aligner)."""

    format_ok: bool  # S's own trajectory is well formed (r_format(S))
    main_correct: float  # r_correct(M) of the call's rollout as R_S uses it (algo main_correct_for_sub)
    subtask: str  # what S was told: subtask_text(task, context)
    findings: str  # what S returned to M
    returned: bool  # S returned a result (a call that returned nothing has nothing to judge)


def sub_rewards(
    calls: Sequence[SubCallFacts], expert: tuple[Judge, Sequence[str]] | None, weights: SubRewardWeights
) -> tuple[np.ndarray, np.ndarray | None]:
    """R_S of each call, docs/method.md §Rewards, and the expert judge's scores (None exactly when `expert` is
    None and the weights fold β3). The one place R_S is assembled: local rollouts and the sub aligner
    both come here."""
    ok = np.array([c.format_ok for c in calls], dtype=bool)
    correct = np.array([c.main_correct for c in calls], dtype=np.float64)
    scores = None
    if expert is not None:
        judge, references = expert
        # The judge reads S's subtask (M's request: task and context) and S's findings: what M got back, not
        # S's transcript; a local rule pays nothing for what the subtask already says (docs/method.md §Rewards).
        scores = np.array(
            [best_score(judge, c.subtask, c.findings, references) if c.returned else 0.0 for c in calls],
            dtype=np.float64,
        )
    return sub_reward(ok, correct, scores, weights), scores


@timed(SCORE)
def score_sub(
    calls: Sequence[SubCall],
    main_correct: Sequence[float],
    expert: tuple[Judge, Sequence[str]] | None,
    weights: SubRewardWeights,
    max_turns: int,
) -> list[SubScore]:
    """SubScore of each call; main_correct[i] is r_correct(M) of call i's rollout as R_S uses it (see
    `algo.rewards.main_correct_for_sub`); `expert` is the expert judge and its references, None exactly
    when the weights fold β3. The judge's question is S's task and context (`subtask_text`)."""
    checks = [format_check(call.episode, max_turns) for call in calls]
    facts = [
        SubCallFacts(
            format_ok=check.ok,
            main_correct=float(correct),
            subtask=subtask_text(call.request.task, call.request.context),
            findings=call.result.findings,
            returned=call.result.ok,
        )
        for call, check, correct in zip(calls, checks, main_correct, strict=True)
    ]
    rewards, scores = sub_rewards(facts, expert, weights)
    return [
        SubScore(
            call_id=call.request.call_id,
            format=check,
            r_format=r_format(check),
            main_correct=fact.main_correct,
            r_expert=None if scores is None else float(scores[i]),
            reward=float(rewards[i]),
        )
        for i, (call, check, fact) in enumerate(zip(calls, checks, facts, strict=True))
    ]
