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
    mgrpo compare --config deploy/configs/compare-smollm2.yaml --warmup --out runs/compare-smollm2  # see make compare
    mgrpo compare --methods m-grpo,main-only --seeds 0,1,2 --set pipeline.queries_per_step=4

Each step of the way is a separate process (`mgrpo run`, `mgrpo eval`) whose output goes to
`<out>/logs/`; a failed one stops the comparison with its log's tail. Before each step it says where the plan
is ("[5/14] run-m-grpo-seed0", steps done, time elapsed and an estimate of the time left). Finished steps are
recorded in `<out>/progress.json` under the key of its command: the same command into the same `--out`
resumes an interrupted comparison without redoing them, and a changed one redoes only the steps it changes
(and what builds on them); a step's key holds the config file's settings, not its comments. Methods: m-grpo, main-only,
single-agent, m-grpo-unaligned (algo.alignment.mode: none, the paper's unsynchronised condition).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from mgrpo_actors.cli.arguments import add_config_arguments, model_overrides
from mgrpo_actors.runtime.disk import DiskFullError, atomic_write_text

__all__ = ["add_parser"]


class StepFailed(RuntimeError):
    """A run or evaluation of the comparison exited non-zero."""


def _mgrpo(out: Path, name: str, *args: str) -> float:
    """Run `mgrpo ARGS` with its output in <out>/logs/<name>.log; its seconds. Raises StepFailed."""
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if args[0] == "run":  # stage 0 is --warmup's (mgrpo warmup); a config's warmup section must not warm starts again
        args = (*args, "--set", "warmup.steps=0")
    started = time.perf_counter()
    print(f"  {name}: mgrpo {' '.join(args[:2])} … (log: {log})", flush=True)
    with open(log, "w") as f:
        code = subprocess.run(
            [str(Path(sys.executable).parent / "mgrpo"), *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        ).returncode
    seconds = time.perf_counter() - started
    if code != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise StepFailed(f"{name} exited {code} after {seconds:.0f} s; last lines of {log}:\n{tail}")
    print(f"  {name}: done in {seconds:.0f} s", flush=True)
    return seconds


class _Steps:
    """Runs the comparison's steps, up to `--parallel` at once (compare/schedule.py): each one reused when it
    finished before with the same command, its outputs still there and nothing it builds on redone
    (compare/progress.py), else run and recorded."""

    def __init__(self, progress: Any, out: Path, config: list[str], config_sha256: str, lanes: Any) -> None:
        self.progress, self.out, self.config, self.config_sha256 = progress, out, config, config_sha256
        self.lanes, self.lock = lanes, threading.Lock()  # progress.json and the console, one step at a time

    def run(self, name: str, outputs: list[Path], after: list[str], *args: str) -> float:
        """Step `name`: `mgrpo ARGS` (the --config flag added after the subcommand) writing `outputs`, after the
        steps `after`; its seconds (as recorded, when reused). StepFailed if it exits 0 without its outputs."""
        with self.lock:
            key = self.progress.key(args, self.config_sha256, after)
            if self.progress.reusable(name, key, outputs):
                print(f"  {self.progress.where(name)}: finished before, reused ({outputs[0]})", flush=True)
                return float(self.progress.records[name]["seconds"])
            print(f"  {self.progress.where(name)}", flush=True)
            self.progress.forget(name)
        with self.lanes.lane():
            seconds = _mgrpo(self.out, name, args[0], *self.config, *args[1:])
        missing = [str(path) for path in outputs if not path.exists()]
        if missing:
            raise StepFailed(f"{name} exited 0 but did not write {missing[0]} (log: {self.out / 'logs' / name}.log)")
        with self.lock:
            self.progress.record(name, key, seconds)
        return seconds


def _sets(overrides: tuple[str, ...] | list[str]) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


def _evaluate(
    steps: _Steps, name: str, after: list[str], cfg: Any, models: dict[str, str], single: bool, seed: int
) -> Path:
    report = steps.out / "evals" / f"{name}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    args = [
        "eval",
        *_sets([*cfg.extra, *(f"agents.{side}.model={path}" for side, path in models.items())]),
        "--split",
        "validation",
        "--limit",
        str(cfg.eval_questions),
        "--runs",
        str(cfg.eval_runs),
        "--batch",
        str(cfg.eval_batch),
        "--seed",
        str(seed),
        "--out",
        str(report),
    ]
    steps.run(f"eval-{name}", [report], after, *args, *(["--single-agent"] if single else []))
    return report


def _export_dir(run_dir: Path, run_id: str, side: str, step: int) -> Path:
    """Where a run's learner exported `side`'s model after `step` steps (plain HF directory)."""
    return run_dir / run_id / "exports" / side / f"step{step}"


def _exported(run_dir: Path, run_id: str, step: int, start: dict[str, str], trained: tuple[str, ...]) -> dict[str, str]:
    """The models after `step` steps of a run: the exports of the sides it trains, the start model of the
    others. A trained side without its export is an error, never silently its start model."""
    models = {}
    for side, model in start.items():
        export = _export_dir(run_dir, run_id, side, step)
        if step == 0 or side not in trained:
            models[side] = model
        elif not export.is_dir():
            raise StepFailed(f"{run_id}: no export of the {side} agent after step {step} ({export})")
        else:
            models[side] = str(export)
    return models


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


def _graph(
    cfg: Any, layouts: list[str], starts: dict[str, dict[str, str]], warmup: bool, steps: _Steps, run_dir: Path
) -> tuple[list[Any], list[Any]]:
    """The comparison's steps in plan order, each with the steps it builds on (compare/schedule.py), and its
    method runs. `starts` ({layout: {side: model}}) becomes each layout's start: the models its methods begin
    from, where its warm-up and stage 1 will have put them."""
    from mgrpo_actors.compare.plan import layout_of, method_runs, stage1_overrides, trained_sides
    from mgrpo_actors.compare.schedule import Step

    graph, start_step = [], {}
    for layout in layouts:
        after: list[str] = []
        if warmup:  # stage 0: the optional supervised format warm-up (mgrpo warmup --reuse), per layout
            method = ["run.method=single-agent"] if layout == "single" else []
            warmed = steps.out / f"warmup-{layout}"
            made = [warmed / "warmup.json", *(warmed / side for side in starts[layout])]
            command = ["warmup", *_sets([*cfg.extra, *method]), "--reuse", "--out", str(warmed)]
            graph.append(Step(f"warmup-{layout}", [], partial(steps.run, f"warmup-{layout}", made, [], *command)))
            starts[layout] = {side: str(warmed / side) for side in starts[layout]}
            after = [f"warmup-{layout}"]
        if cfg.stage1_steps:
            name = f"stage1-{layout}"
            exports = {side: _export_dir(run_dir, name, side, cfg.stage1_steps) for side in starts[layout]}
            command = ["run", *_sets(stage1_overrides(cfg, layout, str(run_dir), starts[layout]))]
            made = [run_dir / name / "summary.json", *exports.values()]
            graph.append(Step(name, after, partial(steps.run, name, made, after, *command)))
            starts[layout] = {side: str(path) for side, path in exports.items()}
            after = [name]
        start_step[layout] = after
    for layout in layouts:
        single = layout == "single"
        evaluate = partial(_evaluate, steps, f"start-{layout}", start_step[layout], cfg, starts[layout], single)
        graph.append(Step(f"eval-start-{layout}", start_step[layout], partial(evaluate, cfg.seeds[0])))
    runs = method_runs(cfg, starts, str(run_dir))
    for run in runs:
        trained, start = trained_sides(run.method), starts[layout_of(run.method)]
        made = [
            run_dir / run.run_id / "summary.json",
            *(_export_dir(run_dir, run.run_id, side, step) for side in trained for step in cfg.eval_steps[1:]),
        ]
        after = start_step[layout_of(run.method)]
        name = f"run-{run.run_id}"
        graph.append(Step(name, after, partial(steps.run, name, made, after, "run", *_sets(run.overrides))))
        for step in cfg.eval_steps[1:]:

            def evaluate_export(
                run: Any = run, step: int = step, start: dict = start, trained: tuple = trained
            ) -> Path:
                models = _exported(run_dir, run.run_id, step, start, trained)  # once the run has exported them
                single = run.method == "single-agent"
                return _evaluate(
                    steps, f"{run.run_id}-step{step}", [f"run-{run.run_id}"], cfg, models, single, run.seed
                )

            graph.append(Step(f"eval-{run.run_id}-step{step}", [name], evaluate_export))
    return graph, runs


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
            seeds=args.seeds,
            extra=extra,
        )
        base = load_node_config(args.config, list(extra), "mgrpo compare")
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
    steps = _Steps(None, out, config, hashlib.sha256(config_text).hexdigest(), CoreLanes(cfg.parallel))
    graph, planned = _graph(cfg, layouts, starts, args.warmup, steps, run_dir)
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
        done = run_graph(graph, cfg.parallel)
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
    spent = time_spent(progress.done, built)
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
        help="run up to N steps at once, each on its own share of the cores, as soon as what it builds on is done "
        f"(default {CompareConfig.parallel})",
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
