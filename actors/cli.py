"""`mgrpo`: the project's tools (mgrpo_actors/cli/) plus `run`, the main job, which composes roles."""

from __future__ import annotations

import sys

from actors import run
from mgrpo_actors.cli.main import main as tools_main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    return tools_main(argv, first=(run,))


if __name__ == "__main__":
    sys.exit(main())
