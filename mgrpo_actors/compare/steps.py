"""The steps of `mgrpo compare` (cli/compare.py): each a process of its own (`mgrpo warmup`, `mgrpo run`, `mgrpo eval`)
with its log under <out>/logs/, reused when it finished before (progress.py), and the plan that orders them with
what each builds on (schedule.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from mgrpo_actors.compare.plan import layout_of, method_runs, stage1_overrides, trained_sides
from mgrpo_actors.compare.schedule import Step
from mgrpo_actors.warmup.linked import same_build

__all__ = ["StepFailed", "StepRunner", "export_dir", "plan_graph", "say"]


class StepFailed(RuntimeError):
    """A run or evaluation of the comparison exited non-zero."""


_CONSOLE = threading.Lock()  # steps that run at once print whole lines


def say(line: str) -> None:
    """Print `line` whole, whichever step's thread says it."""
    with _CONSOLE:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class StepRunner:
    """Runs the comparison's steps, up to `--parallel` at once (compare/schedule.py): each one reused when it
    finished before with the same command, its outputs still there and nothing it builds on redone
    (compare/progress.py), else run and recorded."""

    def __init__(self, progress: Any, out: Path, config: list[str], config_sha256: str, lanes: Any) -> None:
        self.progress, self.out, self.config, self.config_sha256 = progress, out, config, config_sha256
        self.lanes, self.lock = lanes, threading.Lock()  # progress.json, one step at a time
        self.children: set[subprocess.Popen] = set()  # the steps' processes running now

    def run(
        self,
        name: str,
        outputs: list[Path],
        after: list[str],
        *args: str,
        current: Callable[[], bool] = lambda: True,
        alone: bool = False,
    ) -> float:
        """Step `name`: `mgrpo ARGS` (the --config flag added after the subcommand) writing `outputs`, after the
        steps `after`; its seconds (as recorded, when reused). StepFailed if it exits 0 without its outputs. A
        finished step is reused only while `current()` also holds (what its outputs point to is what it made).
        `alone`: a step run_graph runs with none beside it, on every core (no lane)."""
        with self.lock:
            key = self.progress.key(args, self.config_sha256, after)
            reusable = self.progress.reusable(name, key, outputs)
            if reusable and current():
                say(f"  {self.progress.where(name)}: finished before, reused ({outputs[0]})")
                return float(self.progress.records[name]["seconds"])
            redone = ": finished before, but what it made has changed since: redone, and what builds on it"
            say(f"  {self.progress.where(name)}{redone if reusable else ''}")
            self.progress.forget(name)
        try:
            with nullcontext() if alone else self.lanes.lane():
                seconds = self._mgrpo(name, args[0], *self.config, *args[1:])
            missing = [str(path) for path in outputs if not path.exists()]
            if missing:
                log = self.out / "logs" / f"{name}.log"
                raise StepFailed(f"{name} exited 0 but did not write {missing[0]} (log: {log})")
        except StepFailed as exc:  # said at once when steps running beside it may take long to finish
            with self.lock:
                others = len(self.children)
            if others:
                say(f"mgrpo compare: {exc}\n(no other step starts; waiting for the {others} still running)")
            raise
        with self.lock:
            self.progress.record(name, key, seconds)
        return seconds

    def _mgrpo(self, name: str, *args: str) -> float:
        """Run `mgrpo ARGS` with its output in <out>/logs/<name>.log; its seconds. Raises StepFailed."""
        log = self.out / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if args[0] == "run":  # stage 0 is --warmup's (mgrpo warmup); a config's warmup section must not warm up again
            args = (*args, "--set", "warmup.steps=0")
        started = time.perf_counter()
        say(f"  {name}: mgrpo {' '.join(args[:2])} … (log: {log})")
        with open(log, "w") as f:
            command = [str(Path(sys.executable).parent / "mgrpo"), *args]
            child = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            with self.lock:
                self.children.add(child)
            try:
                code = child.wait()
            finally:
                with self.lock:
                    self.children.discard(child)
        seconds = time.perf_counter() - started
        if code != 0:
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
            raise StepFailed(f"{name} exited {code} after {seconds:.0f} s; last lines of {log}:\n{tail}")
        say(f"  {name}: done in {seconds:.0f} s")
        return seconds

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the steps' processes running now (the comparison was interrupted): SIGTERM, then SIGKILL after
        `grace_s`. None of them is recorded as done."""
        with self.lock:
            children = list(self.children)
        for child in children:
            child.terminate()
        deadline = time.monotonic() + grace_s
        for child in children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()


def _sets(overrides: tuple[str, ...] | list[str]) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


def _evaluate(
    steps: StepRunner, name: str, after: list[str], cfg: Any, models: dict[str, str], single: bool, seed: int
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


def export_dir(run_dir: Path, run_id: str, side: str, step: int) -> Path:
    """Where a run's learner exported `side`'s model after `step` steps (plain HF directory)."""
    return run_dir / run_id / "exports" / side / f"step{step}"


def _exported(run_dir: Path, run_id: str, step: int, start: dict[str, str], trained: tuple[str, ...]) -> dict[str, str]:
    """The models after `step` steps of a run: the exports of the sides it trains, the start model of the
    others. A trained side without its export is an error, never silently its start model."""
    models = {}
    for side, model in start.items():
        export = export_dir(run_dir, run_id, side, step)
        if step == 0 or side not in trained:
            models[side] = model
        elif not export.is_dir():
            raise StepFailed(f"{run_id}: no export of the {side} agent after step {step} ({export})")
        else:
            models[side] = str(export)
    return models


def plan_graph(
    cfg: Any, layouts: list[str], starts: dict[str, dict[str, str]], warmup: bool, steps: StepRunner, run_dir: Path
) -> tuple[list[Any], list[Any]]:
    """The comparison's steps in plan order, each with the steps it builds on (compare/schedule.py), and its
    method runs. `starts` ({layout: {side: model}}) becomes each layout's start: the models its methods begin
    from, where its warm-up and stage 1 will have put them."""
    graph: list[Any] = []
    start_step: dict[str, list[str]] = {layout: [] for layout in layouts}
    for layout in layouts:  # every warm-up first: each runs alone (compare/schedule.py), so none waits on a stage 1
        if warmup:  # stage 0: the optional supervised format warm-up (mgrpo warmup --reuse), per layout
            sets = [*cfg.extra, *(["run.method=single-agent"] if layout == "single" else [])]
            flags: list[str] = []
            builds_on: list[str] = []
            if layout == "single" and cfg.single_from_main:  # from the M + S layout's warmed M, for fewer steps
                sets.append(f"agents.main.model={steps.out / 'warmup-multi' / 'main'}")
                if cfg.warmup_copy_steps:  # M's warm-up practised copying already
                    sets.append("warmup.copy_steps=0")
                flags, builds_on = ["--steps", str(cfg.single_from_main)], ["warmup-multi"]
            warmed = steps.out / f"warmup-{layout}"
            made = [warmed / "warmup.json", *(warmed / side for side in starts[layout])]
            command = ["warmup", *_sets(sets), *flags, "--reuse", "--out", str(warmed)]
            current = partial(same_build, warmed)
            alone = True  # a training: alone, on every core (the schedule's and the runner's flag, one value)
            work = partial(steps.run, f"warmup-{layout}", made, builds_on, *command, current=current, alone=alone)
            graph.append(Step(f"warmup-{layout}", builds_on, work, alone=alone))
            starts[layout] = {side: str(warmed / side) for side in starts[layout]}
            start_step[layout] = [f"warmup-{layout}"]
    for layout in layouts:
        after = start_step[layout]
        if cfg.stage1_steps:
            name = f"stage1-{layout}"
            exports = {side: export_dir(run_dir, name, side, cfg.stage1_steps) for side in starts[layout]}
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
            *(export_dir(run_dir, run.run_id, side, step) for side in trained for step in cfg.eval_steps[1:]),
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
