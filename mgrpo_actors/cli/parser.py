"""`mgrpo`'s parser: the project's tools. `mgrpo COMMAND --help` documents each one.

The entry point is actors/cli.py, which hands in the Composition (the node and the role table) that
`run`, `demo`, `bench steps|grpo` and `deploy` need; nothing here imports actors/.
"""

from __future__ import annotations

import argparse
import sys

from mgrpo_actors.cli import bench, compare, demo, deploy, ping, rollout, run, tap, warmup, world
from mgrpo_actors.cli import eval as eval_command  # `eval` alone would shadow the builtin here
from mgrpo_actors.cli.composition import Composition
from mgrpo_actors.log import configure_logging

__all__ = ["COMMANDS", "build_parser", "main"]

# Each command module exposes add_parser(subparsers) and sets `func` (args -> exit code).
COMMANDS = (run, demo, deploy, world, tap, ping, bench, rollout, eval_command, warmup, compare)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every command of COMMANDS."""
    parser = argparse.ArgumentParser(
        prog="mgrpo", description="Tools of mgrpo-actors (M-GRPO multi-agent training over NATS)."
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log lines (to stderr) at or above this level",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None, composition: Composition | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.composition = composition
    configure_logging(node="cli", role=args.command, level=args.log_level)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
