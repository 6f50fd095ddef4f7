"""`mgrpo run` (`make run`): the main job on one machine: `mgrpo-node --role all` on an embedded
nats-server, with a live view of the run (mgrpo_actors/monitoring/run_view.py) and at the end a summary table and,
in the run directory `<run.dir>/<run.id>/`, summary.json (per-step rows) and rewards.png.

Every role (but the monitor: this command has its own view) runs in this one process, talking only
over NATS (the same actors a multi-server run starts with `mgrpo-node --role …`): the controller
publishes B rollout requests per step, the main agent (M on its own model) rolls each query out K
times and delegates subtasks to the sub-agent (S on its own model), whose search/visit calls go to
the tool actors; both aligners turn the step's trajectories into exactly B·K and B·K·D samples with
advantages, on the learners' streams.

    mgrpo run                                    # SmolLM2 as M and as S (separate instances)
    mgrpo run --main tiny:main --sub tiny:sub    # tiny models: seconds
    mgrpo run --set pipeline.steps=4 --set pipeline.rollouts_per_query=4
    mgrpo run --method main-only                 # the baselines: S frozen, or one agent with every tool
    mgrpo run --set algo.alignment.mode=none     # the alignment ablation: sub batches from a FIFO queue

Both agents' DeepSpeed learners run too (`--method main-only` keeps S fixed, the main-only baseline;
`--method single-agent` trains one agent with every tool and no sub side): after each step every
learner applies its side's batch and sends the new weights to its side's rollout engine, which rolls
the next step out with them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from mgrpo_actors.cli.arguments import add_config_arguments, model_overrides
from mgrpo_actors.cli.composition import Composition, composition_of
from mgrpo_actors.config import ConfigError, NodeConfig, load_node_config
from mgrpo_actors.config.node import METHODS
from mgrpo_actors.log import configure_logging, quiet_libraries
from mgrpo_actors.monitoring.run_view import RunView
from mgrpo_actors.runtime.compute import start_compute_thread
from mgrpo_actors.runtime.disk import DiskFullError
from mgrpo_actors.runtime.run_credentials import credentials_path

__all__ = ["add_parser", "run_job"]


def _sub_label(config: NodeConfig, sub_type: str) -> str:
    """How the run's first line names a sub-agent type's model: S for the one default type, else its name."""
    return "S" if not config.agents.subs else f"S {sub_type}"


def run_job(config: NodeConfig, console: Console, composition: Composition, resume: bool = False) -> int:
    """The whole run in this process; returns the exit code."""
    roles = composition.expand_roles(["all"], config)
    view = RunView(console, config)
    if config.run.method == "single-agent":
        console.print(f"run {config.run.id!r} (single-agent): {_single_agent(config)}, {config.agents.main.model}")
    else:
        subs = ", ".join(f"{_sub_label(config, t)} {config.agent(t).model}" for t in config.sides[1:])
        console.print(f"run {config.run.id!r} ({config.run.method}): M {config.agents.main.model}, {subs}")
    console.print(f"roles on an embedded nats-server: {', '.join(roles)}")
    shape = (
        f"{config.pipeline.steps} steps × {config.pipeline.queries_per_step} queries × "
        f"{config.pipeline.rollouts_per_query} rollouts"
    )
    if len(config.sides) > 1:  # D is each sub-agent type's own (fixed, or estimated per type)
        shape += f"; D = {config.algo.alignment.d} ({config.algo.alignment.mode})"
    console.print(f"{shape}; loading models…")
    run_dir = Path(config.run.dir) / config.run.id
    # Where its other clients find the run's server and user (the password is never printed).
    console.print(
        f"the server's URL and run user: {credentials_path(run_dir)} (mode 0600; mgrpo tap --run-dir {run_dir})",
        markup=False,
    )
    started = time.perf_counter()
    code = composition.run_node(
        config,
        roles,
        "run",
        embedded=True,
        duration_s=None,
        until_finished=True,
        watch=lambda bus: view.attach(bus, replay=resume),  # a resumed run's view reads back its earlier steps
        resume=resume,
    )
    seconds = time.perf_counter() - started
    view.summary(seconds)
    if view.log.steps:
        try:
            view.write_report(seconds=seconds)  # <run.dir>/<run.id>/summary.json and rewards.png
        except DiskFullError as exc:  # the run itself is done: say so in one line, do not fail it
            console.print(f"run report not written: {exc.strerror}", markup=False)
        except Exception as exc:
            console.print(f"run report not written: {type(exc).__name__}: {exc}", markup=False)
    if code == 0:
        trained_sides = [side for side in config.sides if config.trains(side)]  # each has its learner in `roles`
        console.print(trained_line(config.sides, trained_sides, view.trained_samples))
    return code


def trained_line(sides: Sequence[str], ran: Sequence[str], samples: Mapping[str, int]) -> str:
    """What the run trained, as it did: of the sides whose learner `ran`, one that applied no sample (no group's
    rewards differed) trained nothing, and is said so; a side without a learner is frozen."""
    trained = [side for side in ran if samples.get(side, 0) > 0]
    idle = [side for side in ran if side not in trained]
    frozen = [side for side in sides if side not in ran]
    parts = [f"trained: {', '.join(f'{side} ({samples[side]} samples)' for side in trained) or 'no agent'}"]
    if idle:
        parts.append(f"trained on nothing: {', '.join(idle)} (no sample had an advantage)")
    if frozen:
        parts.append(f"frozen: {', '.join(frozen)}")
    return "; ".join(parts)


def _single_agent(config: NodeConfig) -> str:
    """What the single agent is given (agents.main.tools)."""
    tools, turns = config.agents.main.tools, config.agents.main.max_turns
    if tools is None:
        return "one agent with every tool"
    return (
        f"one agent with {', '.join(tools)}"
        if tools
        else f"plain GRPO, one agent without tools, {turns} turn{'s' if turns > 1 else ''}"
    )


def _overrides(args: argparse.Namespace) -> list[str]:
    overrides = [*args.overrides, *model_overrides(args)]
    if args.method is not None:
        overrides.append(f"run.method={args.method}")
    return overrides


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_node_config(args.config, _overrides(args), "mgrpo run")
    except ConfigError as exc:
        print(f"mgrpo run: error: {exc}", file=sys.stderr)
        return 2
    composition = composition_of(args)
    try:  # the datasets and models the run reads, before the server starts or a model loads
        composition.preflight(config, composition.expand_roles(["all"], config))
    except ValueError as exc:
        print(f"mgrpo run: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(run_id=config.run.id, node="run", role="all", level="warning")
    quiet_libraries()
    console = Console(highlight=False)
    if config.run.compute_thread:
        start_compute_thread()  # the warm-up and the roles compute on one thread (mgrpo_actors/runtime/compute.py)
    if config.warmup.steps > 0:  # the supervised warm start, built once into the model cache (stage 0, before RL)
        from mgrpo_actors.warmup.cached import resolve_warm_start  # torch and transformers: imported on use

        try:
            config, _ = resolve_warm_start(
                config, lambda line: console.print(line, markup=False), _warmup_progress(console)
            )
        except ValueError as exc:
            print(f"mgrpo run: error: {exc}", file=sys.stderr)
            return 2
    if config.pipeline.pool_probe_rollouts:  # resolve_pool leaves a pool named by hand (question_ids) as it is
        # the question pool, chosen among those the starting models answer sometimes (once, then cached)
        from mgrpo_actors.warmup.pool_probe import resolve_pool  # torch and transformers: imported on use

        try:
            config = resolve_pool(config, lambda line: console.print(line, markup=False), resume=args.resume)
        except ValueError as exc:  # a dataset that cannot fill the pool (DatasetError is a ValueError)
            print(f"mgrpo run: error: {exc}", file=sys.stderr)
            return 2
    # SIGINT/SIGTERM stop the node gracefully (run_node), which also stops the embedded nats-server.
    if not args.roofline:
        return run_job(config, console, composition, resume=args.resume)
    from mgrpo_actors.bench.run_roofline import counted_forwards, report  # torch: imported on use

    with counted_forwards() as forwards:
        code = run_job(config, console, composition, resume=args.resume)
    report(forwards, lambda line: console.print(line, markup=False))
    return code


def _warmup_progress(console: Console) -> Callable[[str, int, float], None]:
    def progress(side: str, step: int, loss: float) -> None:
        console.print(f"  warm-up {side}: step {step + 1}, loss {loss:.4f}")

    return progress


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the main job on an embedded nats-server (make run)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(
        p,
        "YAML config (same format as mgrpo-node)",
        "main agent's model (agents.main.model; default smollm2)",
        "sub-agent's model (agents.sub.model; default smollm2, a separate instance)",
    )
    p.add_argument(
        "--roofline",
        action="store_true",
        help="count every forward of the run's hf engines on a CPU and, at the end, print each rollout phase's "
        "forwards against this machine's roofline (measured then)",
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        help="run.method: m-grpo (default: both agents train), main-only (S frozen) "
        "or single-agent (one agent with every tool)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in <run.dir>/<run.id> (killed earlier) instead of starting afresh",
    )
    p.set_defaults(func=_run)
