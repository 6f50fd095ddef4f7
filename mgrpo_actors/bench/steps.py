"""`mgrpo bench steps`: the wall time of each training step of a job whose learners train every step,
split into model compute (rollout generation, learner compute), alignment, weight sync, checkpoints and
the rest (messaging, serialisation, bookkeeping, waiting), and the share of the step that is not model
compute (target ≤ 5 %), with the samples each learner trained on.

The job is the colour-rule demo's (mgrpo_actors/demos/colour_rule.py, `mgrpo demo learn`): tiny:main as
M and tiny:sub as S warmed up on the turn format (built once, cached), its demo config (M delegates to
S, no checkpoints), with K = 8 rollouts per query so that nearly every group's rewards differ (the
warmed-up M is right by chance, 1/4) and both learners at lr 1e-4 instead of the demo's 1e-3 (at 1e-3
every group agreed by step 3), so that both run forward, backward and optimizer step on every sample of
every step (`make run-tiny`'s untrained models earn the same reward on
every rollout, so its learners train on nothing). Every role runs in this process on an embedded
nats-server, `pipeline.steps` = 4 (2 with `--quick`) so that there are steady-state steps, in a
temporary run directory, with the phase recorder on (mgrpo_actors/phases.py). Steps are the windows
from the controller's `step.started` to its `step.finished` event (send times); each window is split
by mgrpo_actors/bench/step_split.py (every instant counted once). Step 0 includes the warm-up (first
generations, DeepSpeed's first step), so the mean is over the steps after it.

It lives in actors/ (not mgrpo_actors/bench/) because it starts the roles; actors/cli.py registers it
with `mgrpo bench`, so `mgrpo bench all` (`make bench`) runs it too.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from mgrpo_actors import phases
from mgrpo_actors.bench.step_split import CATEGORIES, OTHER, StepSplit, mean_split, split_step
from mgrpo_actors.cli.composition import Composition
from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.log import quiet_libraries
from mgrpo_actors.phases import KINDS
from mgrpo_actors.runtime import Bus, Delivery
from protocols import Event, ProtocolError, decode_envelope

__all__ = ["RUN_TINY", "TARGET_SHARE", "TRAINING_K", "measure", "run", "training_job"]

# make run-tiny's overrides
RUN_TINY = ("agents.main.model=tiny:main", "agents.sub.model=tiny:sub", "tools.web_entities=150")
TARGET_SHARE = 0.05  # the target: at most 5 % of a step is not model compute
TRAINING_K = 8  # rollouts per query of the bench's job: groups of 8 whose rewards differ
TRAINING_LR = 1e-4  # the demo's 1e-3 made every group agree by step 3: learners with nothing to train on
RUN_ID = "bench-steps"
LABELS = {
    "generate": "gen",
    "learn": "learn",
    "weights": "weights",
    "checkpoint": "ckpt",
    "align": "align",
    "score": "score",
    OTHER: "other",
}


class _StepWindows:
    """step.started / step.finished send times per step, from the run's events (on the bus thread)."""

    def __init__(self) -> None:
        self.started: dict[int, float] = {}
        self.finished: dict[int, float] = {}
        self.trained: dict[int, dict[str, int]] = {}  # step -> side -> samples its learner trained on
        self.batches: dict[
            int, dict[str, dict[str, Any]]
        ] = {}  # step -> side -> its batch event's figures (samples, tokens, rewards)
        self._lock = threading.Lock()

    def attach(self, bus: Bus) -> None:
        bus.subscribe(bus.subjects.events, self._on_event)

    def _on_event(self, delivery: Delivery) -> None:
        try:
            envelope = decode_envelope(delivery.data)
        except ProtocolError:
            return
        event = envelope.message
        if isinstance(event, Event) and isinstance(event.data.get("step"), int):
            with self._lock:
                if event.kind == "step.started":
                    self.started[event.data["step"]] = envelope.sent_at
                elif event.kind == "step.finished":
                    self.finished[event.data["step"]] = envelope.sent_at
                elif event.kind in ("main.learned", "sub.learned") and isinstance(
                    event.data.get("samples"), (int, float)
                ):
                    self.trained.setdefault(event.data["step"], {})[event.kind.split(".")[0]] = int(
                        event.data["samples"]
                    )
                elif event.kind in ("main.batch", "sub.batch"):
                    self.batches.setdefault(event.data["step"], {})[event.kind.split(".")[0]] = dict(event.data)

    def windows(self) -> list[tuple[int, float, float]]:
        with self._lock:
            return [
                (step, self.started[step], self.finished[step])
                for step in sorted(self.started)
                if step in self.finished
            ]


def measure(
    composition: Composition,
    steps: int = 4,
    overrides: Sequence[str] = (),
    job: Sequence[str] = RUN_TINY,
    run_id: str = RUN_ID,
) -> dict[str, Any]:
    """Run the job of `job` (default make run-tiny's; config overrides) for `steps` steps with the phase
    recorder on. Returns the per-step splits ("splits": StepSplit list), their steady-state mean ("mean":
    steps after step 0; None with one step), the job's exit code, what they were computed from
    ("windows": (step, start, end); "intervals"), the samples each learner trained on per step
    ("trained"), each step's batch figures ("batches": step -> side -> samples, tokens, rewards) and the
    job's config."""
    windows = _StepWindows()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}  # run_node installs its own
    with tempfile.TemporaryDirectory(prefix=f"mgrpo-{run_id}-") as run_dir:
        config = load_config(
            NodeConfig, None, [*job, f"pipeline.steps={steps}", f"run.id={run_id}", f"run.dir={run_dir}", *overrides]
        )
        recorder = phases.enable()
        try:
            code = composition.run_node(
                config,
                composition.expand_roles(["all"], config),
                run_id,
                embedded=True,
                duration_s=None,
                until_finished=True,
                watch=windows.attach,
            )
        finally:
            phases.disable()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    intervals, spans = recorder.intervals(), windows.windows()
    splits = [split_step(step, start, end, intervals) for step, start, end in spans]
    return {
        "exit_code": code,
        "steps": steps,
        "splits": splits,
        "mean": mean_split(splits[1:]),
        "windows": spans,
        "intervals": intervals,
        "intervals_dropped": recorder.dropped,
        "trained": dict(windows.trained),
        "batches": dict(windows.batches),
        "config": config,
    }


def _flat(prefix: str, tree: Mapping[str, Any]) -> list[str]:
    out = []
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out += _flat(f"{prefix}{key}.", value)
        else:
            out.append(f"{prefix}{key}={value if isinstance(value, str) else json.dumps(value)}")
    return out


def training_job(data_dir: Path, k: int = TRAINING_K) -> tuple[str, ...]:
    """The colour-rule demo's job as overrides (its warmed-up models built on first use, its questions
    written into `data_dir`), with K = `k` rollouts per query."""
    from mgrpo_actors.config.node import ToolsConfig
    from mgrpo_actors.demos.colour_rule import demo_config, warmed_models, write_questions

    main_dir, sub_dir = warmed_models(ToolsConfig())
    questions = write_questions(Path(data_dir) / "colour-rule-questions.jsonl")
    tree = demo_config(main_dir, sub_dir, questions, steps=1)
    del tree["pipeline"]["steps"]  # measure() sets it
    tree["pipeline"]["rollouts_per_query"] = k
    for side in ("main", "sub"):  # TRAINING_LR: the groups' rollouts still differ after 4 steps
        tree["learners"][side] = {**tree["learners"][side], "lr": TRAINING_LR}
    return tuple(_flat("", tree))


def run(composition: Composition, quick: bool = False) -> dict[str, Any]:
    """`mgrpo bench steps`: measure and print; `quick` runs 2 steps instead of 4."""
    quiet_libraries()
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)  # the table's 12 columns
    steps = 2 if quick else 4
    console.print(
        f"steps bench: the colour-rule demo's job (warmed-up tiny:main and tiny:sub, K = {TRAINING_K}) for {steps} "
        "steps, in this process…",
        markup=False,
    )
    with tempfile.TemporaryDirectory(prefix="mgrpo-bench-steps-data-") as data_dir:
        results = measure(composition, steps, job=training_job(Path(data_dir)))
    if results["exit_code"] != 0:
        raise RuntimeError(f"the job failed (exit {results['exit_code']})")
    config = results["config"]
    pipeline = config.pipeline
    console.print(
        f"B = {pipeline.queries_per_step} queries × K = {pipeline.rollouts_per_query} rollouts per step, "
        f"D = {config.algo.alignment.d}; both learners train (lr {config.learners.main.lr:g}); "
        f"checkpoint every {config.learners.main.checkpoint_every} steps (0: none)",
        markup=False,
    )
    print_results(results, console)
    return results


SIDES = ("main", "sub")


def _row(label: str, split: StepSplit, trained: Mapping[str, Any] | None = None) -> list[str]:
    return [
        label,
        f"{split.wall:.3f}",
        *(f"{split.seconds[c]:.3f}" for c in CATEGORIES),
        f"{split.non_compute_share:.1%}",
        *(str(trained.get(side, 0)) if trained is not None else "" for side in SIDES),
    ]


def print_results(results: dict[str, Any], console: Console) -> None:
    splits: list[StepSplit] = results["splits"]
    mean: StepSplit | None = results["mean"]
    if not splits:
        console.print("[red]no step finished: nothing measured[/]")
        return
    table = Table(
        title="seconds per step, each instant counted once (* warm-up)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in ("step", "wall", *(LABELS[c] for c in CATEGORIES), "not compute", "M trained", "S trained"):
        table.add_column(column, justify="right")
    trained = results.get("trained", {})
    for split in splits:
        table.add_row(*_row(f"{split.step}{'*' if split.step == 0 else ''}", split, trained.get(split.step, {})))
    steady = f"{splits[1].step}–{splits[-1].step}" if len(splits) > 2 else f"{splits[-1].step}"
    if mean is not None:
        steady_trained = [trained.get(s.step, {}) for s in splits[1:]]
        per_side = {side: sum(t.get(side, 0) for t in steady_trained) / len(steady_trained) for side in SIDES}
        table.add_row(*_row(f"mean {steady}", mean, {k: f"{v:.1f}" for k, v in per_side.items()}), style="bold")
        table.add_row(
            "share",
            "100%",
            *(f"{mean.seconds[c] / mean.wall:.1%}" if mean.wall else "" for c in CATEGORIES),
            "",
            "",
            "",
        )
    console.print(table)
    console.print(
        "model compute: gen (rollout generation), learn (learner forward, backward, step); "
        "then weights (save, publish, fetch, load), ckpt (checkpoints), align (batch building), "
        "score (judging rollouts); other: messaging, serialisation, JetStream/KV round trips, "
        "the agents' and tools' Python work, waiting",
        markup=False,
    )
    if mean is not None:  # each kind's own busy time: kinds that overlap (weights and checkpoint do) show here in full
        console.print(
            "each alone (may overlap), mean: " + ", ".join(f"{LABELS[k]} {mean.busy[k]:.3f} s" for k in KINDS),
            markup=False,
        )
    if results.get("intervals_dropped"):
        console.print(
            f"[yellow]the recorder dropped {results['intervals_dropped']} of its oldest intervals: "
            "the early steps are undercounted[/]"
        )
    console.print(
        "M trained, S trained: samples the main and the sub learner trained on in the step "
        "(0: no sample of its batch had an advantage, so that learner ran no forward/backward)",
        markup=False,
    )
    if trained and not any(n for sides in trained.values() for n in sides.values()):
        console.print(
            "[yellow](0 everywhere: no sample had an advantage (every rollout earned the same reward), "
            "so the learners ran no forward/backward and learn is ~0)[/]"
        )
    reference = mean if mean is not None else splits[0]
    which = (
        f"mean of steps {steady}, step 0 (warm-up) left out" if mean is not None else "step 0 only, warm-up included"
    )
    share = reference.non_compute_share
    verdict = (
        "[green]target met[/]"
        if share <= TARGET_SHARE
        else f"[red bold]TARGET MISSED ({(share - TARGET_SHARE) * 100:.1f} percentage points over)[/]"
    )
    console.print(
        f"not model compute: {share:.1%} of the step "
        f"({reference.wall - reference.compute:.3f} s of {reference.wall:.3f} s; {which}); "
        f"target ≤ {TARGET_SHARE:.0%}: {verdict}"
    )
