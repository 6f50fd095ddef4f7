"""`mgrpo`: the project's tools (mgrpo_actors/cli/) plus `run`, the main job, which composes roles, and
`mgrpo demo` (actors/demo.py), small runs of that job that show learning, and `mgrpo bench steps`
(actors/bench_steps.py) and `mgrpo bench grpo` (actors/bench_grpo.py), which time that job."""

from __future__ import annotations

import sys

from actors import demo, deploy, run
from mgrpo_actors.cli import bench
from mgrpo_actors.cli.main import main as tools_main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    bench.register("steps", "actors.bench_steps")
    bench.register("grpo", "actors.bench_grpo")
    return tools_main(argv, first=(run, demo, deploy))


if __name__ == "__main__":
    sys.exit(main())
