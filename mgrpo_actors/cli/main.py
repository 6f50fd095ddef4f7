"""`mgrpo`: the project's tools. `mgrpo COMMAND --help` documents each one."""

from __future__ import annotations

import argparse
import sys

from mgrpo_actors.cli import bench, ping, run, tap

__all__ = ["build_parser", "main"]

# Each command module exposes add_parser(subparsers) and sets `func` (args -> exit code).
COMMANDS = (run, tap, ping, bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mgrpo", description="Tools of mgrpo-actors (M-GRPO multi-agent training over NATS).")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
