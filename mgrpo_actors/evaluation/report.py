"""`mgrpo eval`'s JSON report: what was evaluated, each run's metrics, their spread over the runs, and
every question's outcome per run (so two reports can be compared question by question)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mgrpo_actors.envs.qa import Question
from mgrpo_actors.evaluation.metrics import QuestionOutcome, run_metrics, spread_over_runs
from mgrpo_actors.evaluation.runner import EvalConfig

__all__ = ["EvalSetup", "eval_report", "question_lines", "questions_path"]


@dataclass(frozen=True)
class EvalSetup:
    """What was evaluated, for the report's header."""

    mode: str  # "main+sub" (M delegating to S) or "single-agent"
    models: dict[str, str]  # agent ("main", "sub") -> model spec or HF directory
    dataset: dict[str, Any]  # {"split", "web_seed", "web_entities"} of the built-in web, or {"file", "fields"}
    available: int  # questions the split or file holds
    correct_judge: str  # the judge of r_correct (agents.correct_judge)
    budgets: dict[str, Any] = field(default_factory=dict)  # per agent: max_turns, max_new_tokens_per_turn, temperature
    # agent -> checkpoint tag (None: frozen, configured model); empty without --checkpoints
    checkpoints: dict[str, str | None] = field(default_factory=dict)


def _question_row(question: Question, index: int, runs: Sequence[Sequence[QuestionOutcome]]) -> dict[str, Any]:
    """Question `index`'s outcome in every run, one list entry per run."""
    outcomes = [run[index] for run in runs]
    return {
        "id": question.id,
        "answer": question.answer,
        "correct": [o.correct for o in outcomes],
        "format_valid": [o.format_valid for o in outcomes],
        "sub_calls": [o.sub_calls for o in outcomes],
        "turns": [o.turns for o in outcomes],
        "answers": [o.answer for o in outcomes],
    }


def eval_report(
    setup: EvalSetup,
    eval_cfg: EvalConfig,
    questions: Sequence[Question],
    runs: Sequence[Sequence[QuestionOutcome]],
    seconds: float,
) -> dict[str, Any]:
    """The report as a JSON-ready dict; `runs[r][i]` is question i's outcome in run r."""
    if len(runs) != eval_cfg.runs or any(len(run) != len(questions) for run in runs):
        raise ValueError(
            f"need {eval_cfg.runs} runs of {len(questions)} outcomes each, got {[len(run) for run in runs]}"
        )
    metrics = [run_metrics(run) for run in runs]
    return {
        "setup": {
            **asdict(setup),
            "questions": len(questions),
            "runs": eval_cfg.runs,
            "seeds": eval_cfg.run_seeds,
            "batch_questions": eval_cfg.batch_questions,  # a rollout depends on the batch it shares (runner.py)
        },
        "runs": [
            {"run": r, "seed": seed, **asdict(m)}
            for r, (seed, m) in enumerate(zip(eval_cfg.run_seeds, metrics, strict=True))
        ],
        "aggregate": {name: asdict(spread) for name, spread in spread_over_runs(metrics).items()},
        "questions": [_question_row(question, index, runs) for index, question in enumerate(questions)],
        "seconds": round(seconds, 3),
    }


def questions_path(report_path: str | Path) -> Path:
    """Where the per-question lines go beside a report: eval.json -> eval.questions.jsonl."""
    path = Path(report_path)
    return path.with_name(f"{path.name.removesuffix('.json')}.questions.jsonl")


def question_lines(report: dict[str, Any]) -> str:
    """The report's outcomes as JSON lines, one per question and run: id, run, seed, answer (M's), gold,
    correct, format_valid, sub_calls, turns."""
    seeds = report["setup"]["seeds"]
    lines = []
    for row in report["questions"]:
        for run, seed in enumerate(seeds):
            line = {
                "id": row["id"],
                "run": run,
                "seed": seed,
                "answer": row["answers"][run],
                "gold": row["answer"],
                "correct": row["correct"][run],
                "format_valid": row["format_valid"][run],
                "sub_calls": row["sub_calls"][run],
                "turns": row["turns"][run],
            }
            lines.append(json.dumps(line, ensure_ascii=False))
    return "".join(f"{line}\n" for line in lines)
