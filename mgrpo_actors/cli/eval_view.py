"""The work behind `mgrpo eval` (see mgrpo_actors/cli/eval.py): config, questions, models, the runs
under a progress bar, then a table of each metric's mean ± std and the JSON report.

Kept apart from the command's parser so `mgrpo` starts without importing torch and transformers.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from transformers.utils import logging as transformers_logging

from mgrpo_actors.agents.setup import agent_tools, load_agent, of_kinds, rollout_config, synthetic_web
from mgrpo_actors.cli.rollout_view import rollout_overrides
from mgrpo_actors.config import ConfigError, NodeConfig, load_node_config
from mgrpo_actors.envs.dataset import DatasetError, load_questions
from mgrpo_actors.envs.pages import Page
from mgrpo_actors.envs.qa import Question, QuestionFields
from mgrpo_actors.envs.questions import QuestionConfig
from mgrpo_actors.evaluation.checkpoints import CheckpointError, checkpoint_models, with_models
from mgrpo_actors.evaluation.metrics import METRICS
from mgrpo_actors.evaluation.report import EvalSetup, eval_report, question_lines, questions_path
from mgrpo_actors.evaluation.runner import EvalConfig, evaluate
from mgrpo_actors.models.loader import ModelSpecError
from mgrpo_actors.runtime.disk import DiskFullError, atomic_write_text

__all__ = ["run_eval_command"]

LABELS = {
    "accuracy": "accuracy",
    "format_valid": "format valid",
    "sub_calls": "sub calls / question",
    "turns": "turns / question",
    "reward": "R_M",
}
_FIELD_FLAGS = ("question_field", "answer_field", "id_field", "aliases_field")


class EvalError(ValueError):
    """A usage, config, data or model error: `mgrpo eval` exits 2 with this one-line message."""


def _check_args(args: argparse.Namespace) -> None:
    if args.runs < 1:
        raise EvalError(f"need --runs >= 1, got {args.runs}")
    if args.kinds is not None and args.file is not None:
        raise EvalError("--kinds selects the built-in web's questions by kind; a --file's questions have none")
    if args.limit is not None and args.limit < 1:
        raise EvalError(f"need --limit >= 1, got {args.limit}")
    if args.batch < 1:
        raise EvalError(f"need --batch >= 1, got {args.batch}")
    given = [f"--{name.replace('_', '-')}" for name in _FIELD_FLAGS if getattr(args, name) is not None]
    if given and args.file is None:
        raise EvalError(f"{', '.join(given)} name fields of a --file; the built-in web's questions have their own")
    if args.out is not None and not Path(args.out).resolve().parent.is_dir():
        raise EvalError(
            f"--out {args.out}: no directory {str(Path(args.out).resolve().parent)!r} to write the report into"
        )


def _config(args: argparse.Namespace, out: Console) -> tuple[NodeConfig, dict[str, str | None]]:
    """The node config with the command's overrides, and the checkpoint tag of each agent --checkpoints set."""
    kinds = [] if args.kinds is None else [f"pipeline.kinds=[{args.kinds}]"]
    config = load_node_config(args.config, [*rollout_overrides(args), *kinds], "mgrpo eval")
    if args.checkpoints is None:
        return config, {}
    single = args.single_agent or config.run.method == "single-agent"
    flags = {"main": args.main, "sub": None if single else args.sub}
    sides = [side for side in (("main",) if single else ("main", "sub")) if flags[side] is None]  # --main/--sub win
    models = checkpoint_models(args.checkpoints, config, sides)
    for entry in models:
        if entry.tag is None:
            out.print(
                f"{entry.side}: no checkpoint in {args.checkpoints} (the agent does not train): "
                f"keeps agents.{entry.side}.model {entry.model}",
                markup=False,
            )
    return with_models(config, models), {entry.side: entry.tag for entry in models}


def _questions(
    args: argparse.Namespace, config: NodeConfig
) -> tuple[list[Question], dict[str, Any], list[Page] | None]:
    """(the questions, the dataset's description, the pages the tools serve: None for the configured ones)."""
    if args.file is not None:
        defaults = QuestionFields()
        fields = QuestionFields(
            question=args.question_field or defaults.question,
            answer=args.answer_field or defaults.answer,
            id=args.id_field or defaults.id,
            aliases=args.aliases_field or defaults.aliases,
        )
        return load_questions(args.file, fields), {"file": args.file, "fields": asdict(fields)}, None
    web = synthetic_web(config.tools)
    split = args.split or "validation"
    kinds = config.pipeline.kinds
    dataset = {"split": split, "web_seed": config.tools.web_seed, "web_entities": config.tools.web_entities}
    if config.tools.web_questions != QuestionConfig.num_questions:  # said only when not the default (as before it)
        dataset["web_questions"] = config.tools.web_questions
    if kinds is not None:  # the kinds the run trains on (pipeline.kinds, or --kinds)
        dataset["kinds"] = list(kinds)
    return of_kinds(list(web.splits[split]), kinds), dataset, web.pages


def _table(report: dict[str, Any]) -> Table:
    runs = report["runs"]
    table = Table(
        title=f"{report['setup']['questions']} questions × {len(runs)} runs (seeds {report['setup']['seeds']})"
    )
    for column in ("metric", "mean", "± std", "min", "max", *(f"run {run['run']}" for run in runs)):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name in METRICS:
        s = report["aggregate"][name]
        table.add_row(
            LABELS[name],
            f"{s['mean']:.3f}",
            f"{s['std']:.3f}",
            f"{s['min']:.3f}",
            f"{s['max']:.3f}",
            *(f"{run[name]:.3f}" for run in runs),
        )
    return table


def _run(args: argparse.Namespace, out: Console, err: Console) -> int:
    started = time.perf_counter()
    _check_args(args)
    config, tags = _config(args, out)
    torch.set_num_threads(config.agents.torch_threads)
    eval_cfg = EvalConfig(
        runs=args.runs,
        seed=args.seed,
        single_agent=args.single_agent or config.run.method == "single-agent",
        batch_questions=args.batch,
    )
    questions, dataset, pages = _questions(args, config)
    available = len(questions)
    questions = questions[: args.limit] if args.limit is not None else questions
    agents = config.agents
    sides = ("main",) if eval_cfg.single_agent else ("main", "sub")
    main = load_agent(agents.main)
    sub = None if eval_cfg.single_agent else load_agent(agents.sub)
    tools = agent_tools(config.tools, main, agents.main.max_new_tokens_per_turn, pages=pages)
    cfg = rollout_config(agents, config.algo)
    setup = EvalSetup(
        mode="single-agent" if eval_cfg.single_agent else "main+sub",
        models={side: getattr(agents, side).model for side in sides},
        dataset=dataset,
        available=available,
        correct_judge=agents.correct_judge,
        budgets={
            side: {
                key: getattr(getattr(agents, side), key)
                for key in ("max_turns", "max_new_tokens_per_turn", "temperature")
            }
            for side in sides
        },
        checkpoints=tags,
    )
    where = f"split {dataset['split']}" if "split" in dataset else dataset["file"]
    out.print(
        f"{setup.mode}: {', '.join(f'{side} {model}' for side, model in setup.models.items())} · "
        f"{len(questions)} of {available} questions of {where} · {args.runs} runs",
        markup=False,
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err) as progress:
        task = progress.add_task("rollouts (questions × runs)", total=len(questions) * eval_cfg.runs)
        runs = evaluate(questions, main, sub, tools, cfg, eval_cfg, on_question=lambda: progress.advance(task))
    report = eval_report(setup, eval_cfg, questions, runs, time.perf_counter() - started)
    out.print(_table(report))
    if args.out is not None:
        try:  # whole or not at all (runtime/disk.py); a full disk in one line
            atomic_write_text(args.out, json.dumps(report, indent=2, ensure_ascii=False) + "\n", "the eval report")
            lines = atomic_write_text(questions_path(args.out), question_lines(report), "the per-question outcomes")
        except DiskFullError as exc:
            err.print(f"mgrpo eval: {exc.strerror}", markup=False)
            return 1
        out.print(f"report written to {args.out}, each question's outcome per run to {lines}", markup=False)
    return 0


def run_eval_command(args: argparse.Namespace) -> int:
    """`mgrpo eval`; 2 with a one-line message on a usage, config, data or model error. The torch thread
    count is restored afterwards (the command may run in-process)."""
    out, err = Console(highlight=False, soft_wrap=True), Console(stderr=True, highlight=False, soft_wrap=True)
    transformers_logging.disable_progress_bar()  # "Loading weights" bars would interleave with the progress bar
    threads = torch.get_num_threads()
    try:
        return _run(args, out, err)
    except (EvalError, ConfigError, DatasetError, CheckpointError, ModelSpecError) as exc:
        err.print(f"mgrpo eval: error: {exc}", markup=False)
        return 2
    finally:
        torch.set_num_threads(threads)
