"""`mgrpo compare`: the methods side by side (docs/method.md §Training schedule: M-GRPO against main-only and
single-agent, and aligned against unaligned), with the same seeds and budget, evaluated along the way.

    0. with `--warmup`, `mgrpo warmup --reuse` per agent layout (the optional supervised format warm-up,
       built once per machine in the model cache and reused while its settings stay the same);
    1. a stage-1 warm start per agent layout (`--stage1-steps`, one-fact lookups: M + S trained with
       M-GRPO, and the single agent trained alone), shared by every method of that layout;
    2. every method (`--methods`) for `--steps` stage-2 steps from that start (`mgrpo run`), once per seed
       of `--seeds`, its models exported every `--eval-every` steps;
    3. `mgrpo eval` of the start and of each export on `--eval-questions` validation questions,
       `--eval-runs` sampled runs each, `--eval-batch` questions rolled out together;
    4. in `--out`: compare.json (every curve and figure; per method the final validation accuracy over the
       seeds with a 95 % t-interval; M-GRPO paired against each other method question by question),
       compare.md (the tables) and compare.png (reward curves of both agents and validation accuracy per
       method, mean and spread over the seeds, like the paper's figures).

    mgrpo compare --main tiny:main --sub tiny:sub --steps 2 --eval-every 1 --out runs/compare-tiny
    mgrpo compare --config deploy/configs/compare-smollm2.yaml --warmup --out runs/compare-smollm2
    mgrpo compare --methods m-grpo,main-only --seeds 0,1,2 --set pipeline.queries_per_step=4

Each step of the way is a separate process (`mgrpo run`, `mgrpo eval`) whose output goes to
`<out>/logs/`; a failed one stops the comparison with its log's tail. `--parallel N` runs up to N steps at
once, each as soon as what it builds on is done, each pinned to its own share of the cores (a warm-up runs
alone, on every core).
`--single-from-main N` warms the single agent up from the M + S warm-up's M, for N steps. Before each step
it says where the plan is ("[5/14] run-m-grpo-seed0", steps done, time elapsed and an estimate of the time
left). Finished steps are
recorded in `<out>/progress.json` under the key of its command: the same command into the same `--out`
resumes an interrupted comparison without redoing them, and a changed one redoes only the steps it changes
(and what builds on them); a step's key holds the config file's settings, not its comments. Methods: m-grpo, main-only,
single-agent, m-grpo-unaligned (algo.alignment.mode: none, the paper's unsynchronised condition).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from mgrpo_actors.cli.arguments import add_config_arguments, model_overrides
from mgrpo_actors.runtime.disk import DiskFullError, atomic_write_text

__all__ = ["add_parser"]


def _config_content(path: str | None) -> bytes:
    """What of a config file a step's key holds: its settings as JSON, in the file's order (a comment or the
    layout edited: the same steps; the order of agents.subs is the order of M's tools, so it counts)."""
    if not path:
        return b""
    return json.dumps(yaml.safe_load(Path(path).read_text(encoding="utf-8")), default=str).encode()


def _seed_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are integers separated by commas, got {text!r}") from None


def _plain(settings: dict[str, Any]) -> dict[str, Any]:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in settings.items()}


def compare(args: argparse.Namespace) -> int:
    from mgrpo_actors.compare.plan import CompareConfig, layout_of
    from mgrpo_actors.compare.plot import write_compare_png
    from mgrpo_actors.compare.progress import PlanProgress
    from mgrpo_actors.compare.results import (
        REFERENCE,
        markdown_table,
        method_result,
        method_summary,
        paired_against,
        time_line,
        time_spent,
    )
    from mgrpo_actors.compare.schedule import CoreLanes, run_graph
    from mgrpo_actors.compare.steps import StepFailed, StepRunner, plan_graph
    from mgrpo_actors.config import ConfigError, load_node_config

    extra = (*args.overrides, *model_overrides(args))
    try:
        cfg = CompareConfig(
            methods=tuple(args.methods.split(",")),
            steps=args.steps,
            eval_every=args.eval_every,
            stage1_steps=args.stage1_steps,
            eval_questions=args.eval_questions,
            eval_runs=args.eval_runs,
            eval_batch=args.eval_batch,
            parallel=args.parallel,
            single_from_main=args.single_from_main,
            seeds=args.seeds,
            extra=extra,
        )
        if cfg.single_from_main and not args.warmup:
            raise ValueError("--single-from-main starts the single agent's warm-up from M's: it needs --warmup")
        base = load_node_config(args.config, list(extra), "mgrpo compare")
        cfg = dataclasses.replace(cfg, warmup_copy_steps=base.warmup.copy_steps)
        if 0 < cfg.single_from_main <= base.warmup.lr_ramp_steps:
            raise ValueError(
                f"--single-from-main {cfg.single_from_main} is not above warmup.lr_ramp_steps "
                f"{base.warmup.lr_ramp_steps} (the single agent's warm-up takes the rest of the warmup section)"
            )
    except (ConfigError, ValueError) as exc:
        print(f"mgrpo compare: error: {exc}", file=sys.stderr)
        return 2
    # absolute: the steps' command lines name paths under it, so "x" and "./x" must give the same keys
    out, config = Path(args.out).absolute(), (["--config", args.config] if args.config else [])
    run_dir = out / "runs"
    layouts = sorted({layout_of(m) for m in cfg.methods})
    starts = {
        layout: {"main": base.agents.main.model}
        if layout == "single"
        else {"main": base.agents.main.model, "sub": base.agents.sub.model}
        for layout in layouts
    }
    config_text = _config_content(args.config)  # its settings, not its path or comments, are a step's
    steps = StepRunner(None, out, config, hashlib.sha256(config_text).hexdigest(), CoreLanes(cfg.parallel))
    graph, planned = plan_graph(cfg, layouts, starts, args.warmup, steps, run_dir)
    progress = steps.progress = PlanProgress(out, [step.name for step in graph], parallel=cfg.parallel)
    print(
        f"comparing {', '.join(cfg.methods)}: {cfg.stage1_steps} stage-1 + {cfg.steps} stage-2 steps each, "
        f"evaluated at steps {cfg.eval_steps} on {cfg.eval_questions} validation questions × {cfg.eval_runs} runs; "
        f"{len(progress.steps)} steps, up to {cfg.parallel} at once",
        flush=True,
    )
    if progress.done:
        print(
            f"resuming: {len(progress.done)} of {len(progress.steps)} steps finished before ({progress.path}); "
            "each runs again if its command changed, its output is gone or what it builds on was redone",
            flush=True,
        )
    try:
        done = run_graph(graph, cfg.parallel, stop=steps.stop)
        per_seed: dict[str, list[dict[str, Any]]] = {method: [] for method in cfg.methods}
        for run in planned:
            evals = {0: done[f"eval-start-{layout_of(run.method)}"]}
            evals.update({step: done[f"eval-{run.run_id}-step{step}"] for step in cfg.eval_steps[1:]})
            summary = run_dir / run.run_id / "summary.json"
            per_seed[run.method].append(method_result(summary, evals, done[f"run-{run.run_id}"], run.seed))
    except StepFailed as exc:
        print(f"mgrpo compare: {exc}", file=sys.stderr)
        return 1
    except DiskFullError as exc:  # progress.json
        print(f"mgrpo compare: {exc.strerror}", file=sys.stderr)
        return 1
    results = {method: method_summary(runs) for method, runs in per_seed.items()}
    paired = paired_against(results)
    if not paired:
        print(
            f"no paired test: it pairs {REFERENCE} with each other method, and needs both among --methods "
            "and at least 2 questions they share",
            flush=True,
        )
    built = {
        layout: float(json.loads((out / f"warmup-{layout}" / "warmup.json").read_text()).get("seconds", 0.0))
        for layout in layouts
        if args.warmup
    }
    spent = time_spent(progress.done, built, progress.wall_seconds, cfg.parallel)
    document = {
        "config": {**_plain(vars(cfg)), "warmup": args.warmup},
        "eval_steps": cfg.eval_steps,
        "starts": starts,
        "command": " ".join(["mgrpo", "compare", *sys.argv[2:]] if sys.argv[1:2] == ["compare"] else sys.argv),
        "methods": results,
        "paired": paired,  # m-grpo - each other method, question by question on the final evaluations
        "time": spent,
    }
    try:  # each file whole or not at all (runtime/disk.py); a full disk in one line
        atomic_write_text(out / "compare.json", json.dumps(document, indent=2) + "\n", "the comparison")
        table = markdown_table(results, paired) + f"\nTime: {time_line(spent)}.\n"
        atomic_write_text(out / "compare.md", table, "the comparison table")
        title = f"{base.agents.main.model} / {base.agents.sub.model}: {cfg.steps} steps"
        write_compare_png(results, out / "compare.png", title=title)
    except DiskFullError as exc:
        print(f"mgrpo compare: {exc.strerror}", file=sys.stderr)
        return 1
    print(markdown_table(results, paired))
    print(f"{len(progress.steps)} steps done (those of earlier invocations included); {time_line(spent)}")
    print(f"written: {out / 'compare.json'}, {out / 'compare.md'}, {out / 'compare.png'}")
    return 0


def add_parser(subparsers: Any) -> None:
    from mgrpo_actors.compare.plan import CompareConfig

    p = subparsers.add_parser(
        "compare",
        help="run the methods side by side with the same budget and evaluate them",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(
        p,
        "base node config YAML for every run and evaluation",
        "main agent's model (the single agent's too)",
        "sub-agent's model",
        "override a config key in every run and evaluation",
    )
    p.add_argument(
        "--methods",
        default="m-grpo,main-only,single-agent,m-grpo-unaligned",
        help="comma-separated methods (default: all four)",
    )
    p.add_argument("--steps", type=int, default=6, metavar="N", help="stage-2 steps per method (default 6)")
    p.add_argument(
        "--eval-every",
        type=int,
        default=2,
        metavar="N",
        help="evaluate every N steps, and at the start and the end (default 2)",
    )
    p.add_argument(
        "--warmup",
        action="store_true",
        help="first run `mgrpo warmup` (the optional supervised format warm-up for small models) per layout",
    )
    p.add_argument(
        "--stage1-steps",
        type=int,
        default=2,
        metavar="N",
        help="steps of the shared stage-1 warm start; 0 = none (default 2)",
    )
    p.add_argument(
        "--eval-questions", type=int, default=16, metavar="N", help="validation questions per evaluation (default 16)"
    )
    p.add_argument("--eval-runs", type=int, default=2, metavar="N", help="sampled runs per evaluation (default 2)")
    p.add_argument(
        "--parallel",
        type=int,
        default=CompareConfig.parallel,
        metavar="N",
        help="run up to N steps at once, each on its own share of the cores, as soon as what it builds on is done; "
        f"a warm-up runs alone, on every core (default {CompareConfig.parallel})",
    )
    p.add_argument(
        "--single-from-main",
        type=int,
        default=CompareConfig.single_from_main,
        metavar="N",
        help="with --warmup: the single agent's warm-up starts from the M + S warm-up's M and takes N steps "
        "(default 0: its own warm-up, from the configured model)",
    )
    p.add_argument(
        "--eval-batch",
        type=int,
        default=CompareConfig.eval_batch,
        metavar="N",
        help=f"questions an evaluation rolls out together (mgrpo eval --batch; default {CompareConfig.eval_batch})",
    )
    p.add_argument(
        "--seeds",
        type=_seed_list,
        default=(0,),
        metavar="S,S,…",
        help="one run per method and seed (run.seed; its evaluations sample from it too); the first also seeds the "
        "shared warm starts (default 0)",
    )
    p.add_argument(
        "--out",
        default="runs/compare",
        metavar="DIR",
        help="where runs, logs, evaluations and the results go (default runs/compare)",
    )
    p.set_defaults(func=compare)
