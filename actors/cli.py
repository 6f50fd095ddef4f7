"""`mgrpo`: the project's tools (mgrpo_actors/cli/), given what only the composition root knows: the
node and the role table, for `mgrpo run`, `mgrpo demo`, `mgrpo bench steps|grpo` and `mgrpo deploy`."""

from __future__ import annotations

import sys

from actors.node import preflight, run_node
from actors.roles import expand_roles, role_accesses
from mgrpo_actors.cli.composition import Composition
from mgrpo_actors.cli.parser import main as tools_main

__all__ = ["COMPOSITION", "main"]

COMPOSITION = Composition(
    run_node=run_node, expand_roles=expand_roles, role_accesses=role_accesses, preflight=preflight
)


def main(argv: list[str] | None = None) -> int:
    return tools_main(argv, composition=COMPOSITION)


if __name__ == "__main__":
    sys.exit(main())
