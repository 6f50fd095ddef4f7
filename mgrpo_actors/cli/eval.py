"""`mgrpo eval`: accuracy, format-valid rate, sub calls and turns per question, and R_M, of M and its
sub-agents (or the single agent) on a split of the built-in web or on any JSONL file of questions and
answers, each the mean of `--runs` sampled runs (one rollout per question per run) with its spread.

    mgrpo eval --main tiny:main --sub tiny:sub --limit 5           # the validation split, 3 runs
    mgrpo eval --split test --runs 5 --out eval.json               # the JSON report as well
    mgrpo eval --kinds lookup,compare --limit 200                  # only questions of those kinds
    mgrpo eval --checkpoints runs/default                          # the latest checkpoints of run "default"
    mgrpo eval --file gaia.jsonl --question-field Question --answer-field "Final answer" --id-field task_id
    mgrpo eval --single-agent --set agents.main.model=path/to/hf_dir
    mgrpo eval --compare a.json b.json                             # paired difference of two reports

Models, budgets, sampling and judges come from the node config (`--config`, `--set`; see
deploy/configs/default.yaml) as for `mgrpo rollout`; the flags below are shortcuts and win over it.
`--checkpoints RUN_DIR` (a run's directory, <run.dir>/<run.id>) evaluates the HF directories of that
run's latest checkpoints; an agent that did not train keeps its configured model; `--main`/`--sub` win.
A JSONL file's other fields are ignored; a line that is not UTF-8 or JSON, or without a question or an
answer, is an error naming its line. Run r samples with seed `--seed` + r. Tools: search and visit
serve the built-in web (or `tools.pages`), reason runs on M. `--out FILE` also writes FILE's name with
`.questions.jsonl` for `.json`: one line per question and run (id, answer, gold, correct, sub calls, turns).
The built-in web's questions are those of `pipeline.kinds` (the kinds a run trains on; `--kinds` wins), else all.

`--compare A B` evaluates nothing: it pairs two `--out` reports question by question (each question's accuracy
over its report's runs) and prints A - B with a 95 % bootstrap interval, a sign-flip permutation p-value and
the questions each got more of; with `--out`, as JSON.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from mgrpo_actors.cli.arguments import add_config_arguments
from mgrpo_actors.envs.dataset import SPLITS

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> int:
    if args.compare is not None:  # two reports read, no model loaded
        return importlib.import_module("mgrpo_actors.cli.eval_compare").run_compare_command(args)
    # Imported on use: torch and transformers take seconds to import, and `mgrpo tap` should not wait.
    return importlib.import_module("mgrpo_actors.cli.eval_view").run_eval_command(args)


def _add_dataset_flags(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--split", choices=SPLITS, help="split of the built-in web (default validation)")
    source.add_argument("--file", metavar="JSONL", help="questions and answers, one JSON object a line")
    p.add_argument("--question-field", metavar="NAME", help="with --file: the question's field (default question)")
    p.add_argument("--answer-field", metavar="NAME", help="with --file: the gold answer's field (default answer)")
    p.add_argument("--id-field", metavar="NAME", help="with --file: the id's field (default id; without it: line-N)")
    p.add_argument("--aliases-field", metavar="NAME", help="with --file: other accepted answers (default aliases)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N questions")
    p.add_argument(
        "--kinds",
        metavar="K1,K2",
        help="only the built-in web's questions of these kinds, e.g. lookup,compare (pipeline.kinds; default: the "
        "config's, else every kind)",
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "eval",
        help="accuracy, format-valid rate, sub calls and turns of M+S (or the single agent) "
        "over a split or a JSONL file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(
        p,
        "node config YAML (the same file mgrpo-node reads)",
        "main agent's model (agents.main.model): smollm2, tiny:main, or a local HF dir",
        "sub-agent's model (agents.sub.model), a separate instance",
        "override a config key, e.g. agents.main.model=DIR",
    )
    p.add_argument(
        "--checkpoints", metavar="RUN_DIR", help="both agents' models from the latest checkpoints of the run in RUN_DIR"
    )
    p.add_argument("--single-agent", action="store_true", help="the baseline: one agent with every tool, no sub-agent")
    _add_dataset_flags(p)
    p.add_argument("--runs", type=int, default=3, metavar="N", help="sampled runs over every question (default 3)")
    p.add_argument(
        "--batch",
        type=int,
        default=16,
        metavar="N",
        help="questions rolled out together as one generate batch (default 16)",
    )
    p.add_argument("--seed", type=int, default=0, help="base sampling seed: run r uses seed + r (default 0)")
    p.add_argument(
        "--out", metavar="FILE", help="write the JSON report here (and each question's outcome per run beside it)"
    )
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="evaluate nothing: the paired difference A - B of two --out reports, question by question",
    )
    p.add_argument("--web-seed", type=int, metavar="N", help="seed of the synthetic web (tools.web_seed)")
    p.add_argument("--entities", type=int, metavar="N", help="entities of the synthetic web (tools.web_entities)")
    p.add_argument("--max-turns", type=int, metavar="N", help="turns per agent (both agents' max_turns)")
    p.add_argument("--max-new-tokens", type=int, metavar="N", help="tokens per turn (both agents)")
    p.add_argument("--max-context-tokens", type=int, metavar="N", help="context budget per agent (both agents)")
    p.add_argument("--temperature", type=float, help="sampling temperature of both agents")
    p.add_argument("--threads", type=int, metavar="N", help="torch CPU threads (agents.torch_threads)")
    p.set_defaults(func=_run)
    return p
