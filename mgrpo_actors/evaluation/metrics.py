"""`mgrpo eval`'s numbers: what one rollout of one question scored, the metrics of one run over every
question (means per question), and each metric's spread over the sampled runs (population std, min,
max: the runs are all there is, not a sample of a larger set of runs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

__all__ = ["METRICS", "QuestionOutcome", "RunMetrics", "Spread", "run_metrics", "spread_over_runs"]


@dataclass(frozen=True)
class QuestionOutcome:
    """One question's rollout in one run."""

    question_id: str  # Question.id
    correct: float  # r_correct of M's answer where M's format is valid, else 0 (as R_M counts it)
    format_valid: bool  # r_format: every turn parsed, within budget, ended with an answer
    sub_calls: int  # d_k: sub-agent invocations (0 for the single agent)
    turns: int  # M's generations (the single agent's)
    reward: float  # R_M
    answer: str | None  # M's final answer; None when it gave none


@dataclass(frozen=True)
class RunMetrics:
    """One run's means over its questions."""

    accuracy: float  # mean of QuestionOutcome.correct
    format_valid: float  # share of rollouts with a valid format
    sub_calls: float  # sub calls per question
    turns: float  # M's turns per question
    reward: float  # mean R_M


METRICS = tuple(f.name for f in fields(RunMetrics))  # the metrics, in report and table order


@dataclass(frozen=True)
class Spread:
    """One metric over the runs."""

    mean: float  # mean over runs
    std: float  # population standard deviation over runs (0 for one run)
    min: float  # lowest run
    max: float  # highest run


def run_metrics(outcomes: Sequence[QuestionOutcome]) -> RunMetrics:
    """The means of one run's outcomes (one per question)."""
    if not outcomes:
        raise ValueError("a run needs at least one question")
    return RunMetrics(
        accuracy=float(np.mean([o.correct for o in outcomes])),
        format_valid=float(np.mean([o.format_valid for o in outcomes])),
        sub_calls=float(np.mean([o.sub_calls for o in outcomes])),
        turns=float(np.mean([o.turns for o in outcomes])),
        reward=float(np.mean([o.reward for o in outcomes])),
    )


def spread_over_runs(runs: Sequence[RunMetrics]) -> dict[str, Spread]:
    """Each metric's mean, std, min and max over the runs, by metric name (METRICS order)."""
    if not runs:
        raise ValueError("need at least one run")
    spreads = {}
    for name in METRICS:
        values = np.array([getattr(run, name) for run in runs], dtype=np.float64)
        spreads[name] = Spread(
            mean=float(values.mean()), std=float(values.std()), min=float(values.min()), max=float(values.max())
        )
    return spreads
