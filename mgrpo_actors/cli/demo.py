"""`mgrpo demo learn` (`make run-learn`): watch M-GRPO teach two tiny models a rule, on a CPU, in about a
minute, through the whole pipeline `mgrpo run` uses (every role on an embedded nats-server, both
DeepSpeed learners, weight sync back to the rollout engines).

The task is the colour rule (mgrpo_actors/demos/colour_rule.py): the gold answer is always "blue".
tiny:main (M) and tiny:sub (S) (or the models `--main` and `--sub` name) are first warmed up on the
turn format only (a short supervised fine-tune, built once and cached), which leaves M right by chance
(1/4); the RL steps then have to find the rule. `--flip` runs the control: every advantage's sign
flipped, so M unlearns it.

    mgrpo demo learn                 # 12 steps: M correct goes from ~0.25 to ~1
    mgrpo demo learn --flip          # the control: M correct goes to ~0
    mgrpo demo learn --steps 20 --set learners.main.lr=5e-4
    mgrpo demo learn --sub tiny:grpo --steps 4  # S of another family (Qwen2) with its own tokenizer

M and S may be of different model families with different tokenizers: only text crosses between agents
(a subtask, a result), each side tokenizes it with its own tokenizer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from mgrpo_actors.cli.composition import Composition, composition_of
from mgrpo_actors.cli.run import run_job
from mgrpo_actors.config import ConfigError, NodeConfig
from mgrpo_actors.config.loader import apply_overrides, from_dict
from mgrpo_actors.log import configure_logging, quiet_libraries

__all__ = ["add_parser", "demo_learn"]


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra`'s keys set, nested mappings merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def demo_learn(args: argparse.Namespace, console: Console, composition: Composition) -> int:
    """Build (or reuse) the warmed-up models, then run the demo job; returns the exit code."""
    from mgrpo_actors.demos.colour_rule import demo_config, warmed_models, write_questions  # torch: only when run

    try:
        data = yaml.safe_load(Path(args.config).read_text()) or {} if args.config else {}
        base = from_dict(NodeConfig, apply_overrides(dict(data), list(args.overrides)))
    except (ConfigError, OSError, yaml.YAMLError) as exc:
        print(f"mgrpo demo: error: {exc}", file=sys.stderr)
        return 2
    from mgrpo_actors.models.loader import ModelSpecError

    console.print(f"warming {args.main} and {args.sub} up on the turn format (once; cached after)…")
    try:
        main_dir, sub_dir = warmed_models(base.tools, main=args.main, sub=args.sub)
    except ModelSpecError as exc:
        print(f"mgrpo demo: error: {exc}", file=sys.stderr)
        return 2
    Path(base.run.dir).mkdir(parents=True, exist_ok=True)  # beside the run directory, which a fresh run clears
    questions = write_questions(Path(base.run.dir) / "colour-rule-questions.jsonl")
    data = _merged(
        data,
        {"run": {"id": args.run_id}, **demo_config(main_dir, sub_dir, questions, args.steps, -1 if args.flip else 1)},
    )
    try:
        config = from_dict(NodeConfig, apply_overrides(data, list(args.overrides)))
    except ConfigError as exc:
        print(f"mgrpo demo: error: {exc}", file=sys.stderr)
        return 2
    rule = "advantages sign-flipped (the control: M should unlearn the rule)" if args.flip else "M should learn it"
    console.print(f"the rule: the answer is always 'blue'; {rule}")
    return run_job(config, console, composition)


def _run(args: argparse.Namespace) -> int:
    configure_logging(run_id=args.run_id, node="demo", role="all", level="warning")
    quiet_libraries()
    return demo_learn(args, Console(highlight=False), composition_of(args))


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="small runs that show learning on a CPU (make run-learn)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demos = p.add_subparsers(dest="demo", required=True, metavar="DEMO")
    learn = demos.add_parser("learn", help="two tiny models learn the colour rule through the whole pipeline (~1 min)")
    learn.add_argument("--steps", type=int, default=12, help="M-GRPO steps (default 12)")
    learn.add_argument(
        "--main",
        default="tiny:main",
        metavar="SPEC",
        help="M's base model, warmed up first: a tiny preset, smollm2 or a local HF directory (default tiny:main)",
    )
    learn.add_argument(
        "--sub",
        default="tiny:sub",
        metavar="SPEC",
        help="S's base model, warmed up first (default tiny:sub; tiny:grpo is another family with its own tokenizer)",
    )
    learn.add_argument(
        "--flip", action="store_true", help="flip every advantage's sign: the control run, which must not learn"
    )
    learn.add_argument(
        "--run-id", default="colour-rule", help="run id (default colour-rule; its directory is <run.dir>/<run id>)"
    )
    learn.add_argument(
        "--config",
        metavar="FILE",
        help="base YAML config (e.g. run.dir, nats limits); the demo sets agents, pipeline, learners",
    )
    learn.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="override a config key (after the demo's)",
    )
    learn.set_defaults(func=_run)
