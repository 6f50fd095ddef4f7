"""What only the composition root (actors/) knows, handed down to the commands that start roles or
render their NATS users: `mgrpo run`, `mgrpo demo`, `mgrpo bench steps|grpo` and `mgrpo deploy`.
Nothing in mgrpo_actors imports actors/ (the layering): actors/cli.py builds one Composition and
`mgrpo`'s parser passes it to every command as `args.composition`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mgrpo_actors.config import NodeConfig
    from mgrpo_actors.deploy.access import RoleAccess

__all__ = ["Composition", "composition_of"]


@dataclass(frozen=True)
class Composition:
    """The node and the role table, as the commands above the roles use them."""

    # actors.node.run_node(config, roles, name, embedded=, duration_s=, until_finished=, watch=, resume=):
    # the roles' actors on one bus until the run is finished or the node is stopped; returns the exit code.
    run_node: Callable[..., int]
    # actors.roles.expand_roles(requested, config): `all` and duplicates resolved, in start order.
    expand_roles: Callable[[list[str], NodeConfig | None], list[str]]
    # actors.roles.role_accesses(sub_types): what each role's NATS user may do in a run of those sub-agent types,
    # by user (a role of the sub side once per type).
    role_accesses: Callable[[tuple[str, ...]], Mapping[str, RoleAccess]]
    # actors.node.preflight(config, roles): what the roles read and need, checked before anything starts
    # (ValueError naming the file, line or key).
    preflight: Callable[[NodeConfig, list[str]], None]


def composition_of(args: Any) -> Composition:
    """The Composition `mgrpo` was started with; a clear error when a command runs without one."""
    composition = getattr(args, "composition", None)
    if composition is None:
        raise RuntimeError("this command starts roles: run it through `mgrpo` (actors/cli.py), which composes them")
    return composition
