"""The role table: the roles a node can take (design.md §How people use it) and how each one starts
its actors (each role's start function lives in its own module, actors/<role>.py).

A role whose actors are not built yet is listed with what brings it, and refused by `mgrpo-node`
rather than faked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from actors.tool import start_tool_actors
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.runtime import Bus

__all__ = ["ROLES", "RoleSpec", "expand_roles", "unbuilt_roles"]

# start(bus, config, started): appends each actor it starts to `started` (so a failure part-way
# leaves nothing running that the node does not know about), raises on failure.
StartFn = Callable[[Bus, NodeConfig, list[Any]], None]


@dataclass(frozen=True)
class RoleSpec:
    """One role: what it does and how its actors start (None while not built)."""

    name: str
    summary: str
    start: StartFn | None = None
    comes_with: str = ""


ROLES: dict[str, RoleSpec] = {
    spec.name: spec
    for spec in (
        RoleSpec("controller", "publishes rollout requests, starts a step when both learners are done", comes_with="the NATS pipeline issue"),
        RoleSpec("main-agent", "runs the main agent's rollouts on its engine", comes_with="the NATS pipeline issue"),
        RoleSpec("sub-agent", "answers subtask requests with sub-agent rollouts", comes_with="the NATS pipeline issue"),
        RoleSpec("tool", "serves search/visit/reason requests in per-tool queue groups", start=start_tool_actors),
        RoleSpec("main-aligner", "groups main trajectories into batches of B*K with advantages", comes_with="the NATS pipeline issue"),
        RoleSpec("sub-aligner", "aligns sub trajectories to D per rollout, batches of B*K*D", comes_with="the NATS pipeline issue"),
        RoleSpec("main-learner", "DeepSpeed learner of the main agent", comes_with="the DeepSpeed learner issue"),
        RoleSpec("sub-learner", "DeepSpeed learner of the sub-agent", comes_with="the DeepSpeed learner issue"),
        RoleSpec("monitor", "live terminal view of metrics and events", comes_with="the monitoring issue"),
    )
}


def expand_roles(requested: list[str]) -> list[str]:
    """Resolve `all` and duplicates, keeping ROLES order; raises ValueError naming unknown roles."""
    unknown = [r for r in requested if r != "all" and r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r}; valid roles: {', '.join([*ROLES, 'all'])}")
    if "all" in requested:
        return list(ROLES)
    return [r for r in ROLES if r in requested]


def unbuilt_roles(roles: list[str]) -> list[RoleSpec]:
    return [ROLES[r] for r in roles if ROLES[r].start is None]
