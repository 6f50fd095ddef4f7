"""`mgrpo eval`'s runs: in each of `runs` sampled runs every question gets one rollout (K = 1) by M and
its sub-agents, or by the single agent, scored exactly as in training (rollout/local.py).

Run r samples with seed `seed + r`; its questions are rolled out `batch_questions` at a time as one
generate batch (M's episodes together, S's delegations together), each batch with a seed derived from
the run's and the batch's index. A question's rollout therefore depends on the batch it shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from mgrpo_actors.envs.qa import Question
from mgrpo_actors.evaluation.metrics import QuestionOutcome, run_metrics
from mgrpo_actors.log import get_logger
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.driver import AgentModel, step_seed
from mgrpo_actors.rollout.local import Rollout, run_rollout_groups, run_single_agent_groups
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = ["EvalConfig", "evaluate", "outcome_of"]

log = get_logger("mgrpo.evaluation")


@dataclass(frozen=True)
class EvalConfig:
    """How `mgrpo eval` samples."""

    runs: int = 3  # sampled runs over every question; the report gives each metric's spread over them
    seed: int = 0  # base seed: run r samples with seed + r
    single_agent: bool = False  # the single-agent baseline (one agent with every tool) instead of M + S
    # questions rolled out together as one generate batch (and their delegations as S's batches)
    batch_questions: int = 16

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"need runs >= 1, got {self.runs}")
        if self.batch_questions < 1:
            raise ValueError(f"need batch_questions >= 1, got {self.batch_questions}")

    @property
    def run_seeds(self) -> list[int]:
        return [self.seed + run for run in range(self.runs)]


def outcome_of(question_id: str, rollout: Rollout) -> QuestionOutcome:
    """What `rollout` scored; its r_correct counts only where M's format is valid, as in R_M."""
    score = rollout.main_score
    return QuestionOutcome(
        question_id=question_id,
        correct=score.r_correct if score.format.ok else 0.0,
        format_valid=score.format.ok,
        sub_calls=len(rollout.sub_calls),
        turns=len(rollout.main.turns),
        reward=score.reward,
        answer=rollout.main.answer,
    )


def _rollouts(
    questions: Sequence[Question],
    main: AgentModel,
    sub: AgentModel | None,
    tools: ToolRegistry,
    cfg: RolloutConfig,
    seed: int | None,
) -> list[Rollout]:
    """One rollout of each question, all generated as one batch."""
    if sub is None:
        groups = run_single_agent_groups(questions, 1, main, tools, cfg, seed=seed)
    else:
        groups = run_rollout_groups(questions, 1, main, sub, tools, cfg, seed=seed)
    return [group.rollouts[0] for group in groups]


def evaluate(
    questions: Sequence[Question],
    main: AgentModel,
    sub: AgentModel | None,
    tools: ToolRegistry,
    cfg: RolloutConfig,
    eval_cfg: EvalConfig,
    on_question: Callable[[], None] | None = None,
) -> list[list[QuestionOutcome]]:
    """Per run, every question's outcome in question order. `sub` is None exactly in single-agent mode
    (`eval_cfg.single_agent`); `on_question()` is called after each rollout (a progress bar)."""
    if (sub is None) != eval_cfg.single_agent:
        raise ValueError("pass a sub-agent model unless in single-agent mode, and none in it")
    if not questions:
        raise ValueError("no questions to evaluate")
    runs = []
    size = eval_cfg.batch_questions
    for run, run_seed in enumerate(eval_cfg.run_seeds):
        outcomes = []
        for first in range(0, len(questions), size):
            batch = questions[first : first + size]
            for question, rollout in zip(
                batch, _rollouts(batch, main, sub, tools, cfg, step_seed(run_seed, first // size)), strict=True
            ):
                outcomes.append(outcome_of(question.id, rollout))
                if on_question is not None:
                    on_question()
        log.info("eval_run_done", run=run, seed=run_seed, questions=len(questions), **asdict(run_metrics(outcomes)))
        runs.append(outcomes)
    return runs
