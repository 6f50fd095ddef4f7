"""`mgrpo bench NAME`: the project's benchmarks (`make bench` runs them all)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BENCHMARKS", "add_parser", "register"]

# name -> module exposing run(quick: bool) -> dict; `register` adds those of the layer above (actors/cli.py)
BENCHMARKS = {
    "bus": "mgrpo_actors.bench.bus",
    "algo": "mgrpo_actors.bench.algo",
    "rollout": "mgrpo_actors.bench.rollout",
    "crossing": "mgrpo_actors.bench.crossing",
    "tools": "mgrpo_actors.bench.tools",
    "soak": "mgrpo_actors.bench.soak",
}


def register(name: str, module: str) -> None:
    """Add a benchmark that lives above this package (one that starts roles: actors/ composes them);
    `all` runs it after these. Call before the parser is built."""
    BENCHMARKS.setdefault(name, module)


def _run(args: Any) -> int:
    if args.name in ("all", "rollout", "algo"):  # they load models: keep "Loading weights" bars out of the tables
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    names = list(BENCHMARKS) if args.name == "all" else [args.name]
    for name in names:
        importlib.import_module(BENCHMARKS[name]).run(quick=args.quick)
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="run benchmarks", description=__doc__)
    p.add_argument("name", choices=[*BENCHMARKS, "all"], help="which benchmark")
    p.add_argument("--quick", action="store_true", help="a few seconds each (smoke test)")
    p.set_defaults(func=_run)
