"""`mgrpo bench NAME`: the project's benchmarks (`make bench` runs them all)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from mgrpo_actors.cli.composition import composition_of

__all__ = ["BENCHMARKS", "add_parser"]

# name -> module exposing run(quick: bool) -> dict, or run(composition, quick) for the benches that start
# roles (the Composition `mgrpo` was started with: cli/composition.py).
BENCHMARKS = {
    "bus": "mgrpo_actors.bench.bus",
    "algo": "mgrpo_actors.bench.algo",
    "rollout": "mgrpo_actors.bench.rollout",
    "narrowing": "mgrpo_actors.bench.narrowing",
    "continuous": "mgrpo_actors.bench.continuous",
    "crossing": "mgrpo_actors.bench.crossing",
    "tools": "mgrpo_actors.bench.tools",
    "soak": "mgrpo_actors.bench.soak",
    "steps": "mgrpo_actors.bench.steps",
    "grpo": "mgrpo_actors.bench.grpo",
    "weights": "mgrpo_actors.bench.weights",
    "learner": "mgrpo_actors.bench.learner",
    "storage": "mgrpo_actors.bench.storage",
}


def _run(args: Any) -> int:
    # they load models: keep "Loading weights" bars out of the tables
    if args.name in ("all", "rollout", "narrowing", "continuous", "algo"):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    names = list(BENCHMARKS) if args.name == "all" else [args.name]
    for name in names:
        run = importlib.import_module(BENCHMARKS[name]).run
        if "composition" in inspect.signature(run).parameters:
            run(composition_of(args), quick=args.quick)
        else:
            run(quick=args.quick)
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="run benchmarks", description=__doc__)
    p.add_argument("name", choices=[*BENCHMARKS, "all"], help="which benchmark")
    p.add_argument("--quick", action="store_true", help="a few seconds each (smoke test)")
    p.set_defaults(func=_run)
