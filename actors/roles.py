"""The role table: the roles a node can take (docs/architecture.md §How people use it) and how each one starts
its actors (each role's start function lives in its own module, actors/<role>.py)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mgrpo_actors.config import NodeConfig
from mgrpo_actors.deploy.access import RoleAccess
from mgrpo_actors.deploy.accounts import sub_account
from mgrpo_actors.runtime import Bus
from protocols import DEFAULT_SUB_TYPE, MAIN_SIDE, Subjects
from protocols.durables import durables
from protocols.subjects import stats_stream

__all__ = [
    "ROLES",
    "START_ORDER",
    "SUB_SIDE_ROLES",
    "RoleSpec",
    "expand_roles",
    "node_streams",
    "node_sub_types",
    "role_accesses",
    "role_streams",
    "role_user",
    "roles_of_all",
    "unused_roles",
]

# start(bus, config, started[, sub_type]): appends each actor it starts to `started` (so a failure part-way
# leaves nothing running that the node does not know about), raises on failure. A role of the sub side starts
# once per sub-agent type the node serves, and is given the type.
StartFn = Callable[..., None]


@dataclass(frozen=True)
class RoleSpec:
    """One role: what it does and how its actors start."""

    name: str
    summary: str
    start: str  # "actors.<module>:<function>", imported when the role starts (a tool node never imports torch)
    streams: tuple[str, ...] = ()  # the run's streams this role reads or writes (created if missing)
    in_all: bool = True  # started by `--role all` (the monitor is not: `mgrpo run` has its own view)
    per_sub_type: bool = False  # a role of the sub side: started once per sub-agent type the node serves

    def start_actors(self, bus: Bus, config: NodeConfig, started: list[Any], sub_types: tuple[str, ...]) -> None:
        """Start the role's actors into `started`: a role of the sub side, those of each of `sub_types`."""
        module, _, function = self.start.partition(":")
        start: StartFn = getattr(importlib.import_module(module), function)
        if not self.per_sub_type:
            start(bus, config, started)
        for sub_type in sub_types if self.per_sub_type else ():
            start(bus, config, started, sub_type)


# What each role touches on NATS besides what every node does (deploy/access.py): the account its user
# lives in (its side: deploy/accounts.py), subjects relative to mgrpo.<run>., streams and buckets by
# short name, durables by the names the actors give them. A role of the sub side has one access per sub-agent type
# (its own account, subjects, streams, buckets and durables); a main agent calls and informs every type.
def _durables(sub_types: tuple[str, ...], *names: str) -> tuple[tuple[str, str], ...]:
    """(stream, durable) of the pipeline's durables (protocols/durables.py) a role pulls from."""
    specs = durables(sub_types)
    return tuple((specs[name].stream, name) for name in names)


def _access(role: str, sub_types: tuple[str, ...], sub_type: str = DEFAULT_SUB_TYPE) -> RoleAccess:
    """The NATS access of `role` (without its streams: RoleSpec.streams) in a run of `sub_types`; a sub side's role
    serving the type `sub_type`."""
    t, names = sub_type, Subjects("r", sub_types)  # the run id is a stand-in: access is declared relative to it
    relative = names.relative
    if role == "controller":
        return RoleAccess(
            "MAIN",
            publish=("step.start", "rollout.request"),
            subscribe=("query.done",),
            durables=_durables(sub_types, "controller"),
            kv_write=(("state", "controller.cursor"),),
        )
    if role == "main-agent":
        return RoleAccess(
            "MAIN",
            publish=("traj.main", *(relative(names.reward_stats_of(x)) for x in sub_types), "query.done"),
            requests=(*(relative(names.subtask_requests_of(x)) for x in sub_types), "tool.*"),
            subscribe=("weights.main",),
            durables=_durables(sub_types, "main-agents"),
            kv_read=("versions-main",),
            objects_read=("weights-main",),
        )
    if role == "sub-agent":
        return RoleAccess(
            sub_account(t),
            publish=(f"traj.{t}",),
            requests=("tool.*",),
            subscribe=(relative(names.subtask_requests_of(t)), f"weights.{t}"),
            kv_read=(f"versions-{t}",),
            objects_read=(f"weights-{t}",),
        )
    if role == "tool":
        return RoleAccess("TOOLS", subscribe=("tool.*",))
    if role == "main-aligner":
        return RoleAccess(
            "MAIN",
            publish=("batch.main", "step.aligned.main"),
            durables=_durables(sub_types, "main-aligner-plans", "main-aligner"),
            kv_write=(("state-main", "aligned.main.>"),),
        )
    if role == "sub-aligner":
        return RoleAccess(
            sub_account(t),
            publish=(f"batch.{t}", f"step.aligned.{t}"),
            durables=_durables(sub_types, f"{t}-aligner-plans", f"{t}-aligner-stats", f"{t}-aligner"),
            # its alignment records, its D estimator, the alignment ablation's queue (alignment/fifo_store.py)
            kv_write=(
                (f"state-{t}", f"aligned.{t}.>"),
                (f"state-{t}", f"d_estimator.{t}"),
                (f"state-{t}", f"fifo.{t}.>"),
            ),
        )
    if role in ("main-learner", "sub-learner"):
        side = MAIN_SIDE if role == "main-learner" else t
        return RoleAccess(
            "MAIN" if side == MAIN_SIDE else sub_account(t),
            publish=(f"weights.{side}", f"step.done.{side}"),
            durables=_durables(sub_types, f"{side}-learner"),
            kv_write=((f"state-{side}", f"learner.{side}"), (f"versions-{side}", f"latest.{side}")),
            objects_write=(f"weights-{side}",),
        )
    if role == "monitor":
        return RoleAccess("MONITOR", replays=("metrics",))
    raise ValueError(f"role {role!r} has no NATS access declared")


ROLES: dict[str, RoleSpec] = {
    spec.name: spec
    for spec in (
        RoleSpec(
            "controller",
            "publishes rollout requests, starts the next step when both sides are done (one per run)",
            start="actors.controller:start_controller",
            streams=("rollouts", "steps"),
        ),
        RoleSpec(
            "main-agent",
            "runs the main agent's rollouts on its engine",
            start="actors.main_agent:start_main_agents",
            streams=("rollouts", "traj-main", "stats"),
        ),
        RoleSpec(
            "sub-agent",
            "answers subtask requests with sub-agent rollouts",
            start="actors.sub_agent:start_sub_agents",
            streams=("traj-sub",),
            per_sub_type=True,
        ),
        RoleSpec(
            "tool", "serves search/visit requests in per-tool queue groups", start="actors.tool:start_tool_actors"
        ),
        RoleSpec(
            "main-aligner",
            "groups main trajectories into batches of B*K with advantages (one per run)",
            start="actors.main_aligner:start_main_aligner",
            streams=("steps", "traj-main", "batch-main"),
        ),
        RoleSpec(
            "sub-aligner",
            "aligns sub trajectories to D per rollout, batches of B*K*D (one per run)",
            start="actors.sub_aligner:start_sub_aligner",
            streams=("steps", "stats", "traj-sub", "batch-sub"),
            per_sub_type=True,
        ),
        RoleSpec(
            "main-learner",
            "DeepSpeed learner of the main agent (one per run)",
            start="actors.learner:start_main_learner",
            streams=("batch-main", "steps"),
        ),
        RoleSpec(
            "sub-learner",
            "DeepSpeed learner of the sub-agent (one per run)",
            start="actors.learner:start_sub_learner",
            streams=("batch-sub", "steps"),
            per_sub_type=True,
        ),
        RoleSpec(
            "monitor",
            "live terminal view of a run: replays its metrics and events from the start, then follows them",
            start="actors.monitor:start_monitor",
            in_all=False,
        ),
    )
}


# Servers before their clients, so in one process every request finds someone listening: tools, then
# the sub side, then the main side, the controller last (its first step starts as it starts).
START_ORDER = (
    "tool",
    "sub-agent",
    "sub-aligner",
    "main-aligner",
    "main-agent",
    "main-learner",
    "sub-learner",
    "monitor",
    "controller",
)


# Every node writes metrics, events and dead letters.
COMMON_STREAMS = ("metrics", "dlq")


def _per_sub_type(stream: str, sub_types: tuple[str, ...]) -> list[str]:
    """A stream of the roles' table as the run names it: a sub side's ("traj-sub", "batch-sub", "stats") once per
    sub-agent type (protocols/subjects.py Subjects.streams)."""
    if stream == "stats":
        return [stats_stream(t) for t in sub_types]
    if stream in ("traj-sub", "batch-sub"):
        return [f"{stream.removesuffix('sub')}{t}" for t in sub_types]
    return [stream]


def role_streams(roles: list[str], sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> list[str]:
    """The run's streams the given roles use, each once, for the sub-agent types `sub_types` (a main-side role
    writes to every type's reward statistics; a sub-side role serves the types its node serves)."""
    named = [*COMMON_STREAMS, *(what for role in roles for what in ROLES[role].streams)]
    return list(dict.fromkeys(name for what in named for name in _per_sub_type(what, sub_types)))


def node_streams(roles: list[str], sub_types: tuple[str, ...], served: tuple[str, ...]) -> list[str]:
    """The streams a node with `roles` uses in a run of `sub_types`, each once: a sub-side role's for the types the
    node serves (`served`); a main-side role's for every type (the main agent writes each type's statistics)."""
    streams = [
        *role_streams([role for role in roles if not ROLES[role].per_sub_type], sub_types),
        *role_streams([role for role in roles if ROLES[role].per_sub_type], served),
    ]
    return list(dict.fromkeys(streams))


def role_user(role: str, sub_type: str = DEFAULT_SUB_TYPE) -> str:
    """The NATS user a role's nodes run as (mgrpo deploy nats-config renders one per role and type): the role's name,
    and for a role of the sub side serving a named type `<type>-agent`, `<type>-aligner` or `<type>-learner`
    (the default type's keep `sub-agent`, `sub-aligner`, `sub-learner`)."""
    if not ROLES[role].per_sub_type or sub_type == DEFAULT_SUB_TYPE:
        return role
    return f"{sub_type}-{role.removeprefix('sub-')}"


def role_accesses(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> dict[str, RoleAccess]:
    """What each role's NATS user may do in a run whose sub-agent types are `sub_types`, by user (role_user): a role
    of the sub side once per type, in that type's account, with that type's subjects, streams, buckets and
    durables; its streams included (RoleSpec.streams, named per type)."""
    accesses = {}
    for role, spec in ROLES.items():
        for t in sub_types if spec.per_sub_type else (DEFAULT_SUB_TYPE,):
            types = (t,) if spec.per_sub_type else sub_types
            own = tuple(dict.fromkeys(name for what in spec.streams for name in _per_sub_type(what, types)))
            accesses[role_user(role, t)] = dataclasses.replace(_access(role, sub_types, t), streams=own)
    return accesses


# The roles of the sub side: a single-agent run has none of them.
SUB_SIDE_ROLES = ("sub-agent", "sub-aligner", "sub-learner")


def node_sub_types(
    config: NodeConfig, requested: list[str] | None = None, roles: list[str] | None = None
) -> tuple[str, ...]:
    """The sub-agent types a node's sub-side roles serve: those `requested` (mgrpo-node --sub-type), else every
    type of the run. ValueError naming a type the config does not have, or when the node's `roles` have none of the
    sub side (the request would be ignored)."""
    if not requested:
        return config.sub_types
    if roles is not None and not any(ROLES[role].per_sub_type for role in roles):
        raise ValueError(
            f"--sub-type chooses what sub-agent, sub-aligner and sub-learner serve: {', '.join(roles)} "
            "serve no sub-agent type"
        )
    unknown = [name for name in requested if name not in config.sub_types]
    if unknown:
        raise ValueError(f"--sub-type {unknown[0]!r}: the config's sub-agent types are {', '.join(config.sub_types)}")
    return tuple(dict.fromkeys(requested))


def unused_roles(config: NodeConfig) -> set[str]:
    """Roles the run's method leaves without work: the learner of an agent that does not train (frozen,
    or S under main-only; the sub-learner when no sub-agent type trains), every sub-side role under single-agent,
    and the tool role when the single agent calls neither search nor visit (plain GRPO: agents.main.tools is []
    or [reason])."""
    unused = {"main-learner"} if not config.trains("main") else set()
    if not any(config.trains(t) for t in config.sub_types):
        unused.add("sub-learner")
    if len(config.sides) == 1:
        unused |= set(SUB_SIDE_ROLES)
        if config.agents.main.tools is not None and not {"search", "visit"} & set(config.agents.main.tools):
            unused.add("tool")
    return unused


def roles_of_all(config: NodeConfig | None = None) -> list[str]:
    """What `--role all` starts: every role but the monitor and those the run's method does not use."""
    unused = unused_roles(config) if config is not None else set()
    return [role for role, spec in ROLES.items() if role not in unused and spec.in_all]


def expand_roles(requested: list[str], config: NodeConfig | None = None) -> list[str]:
    """Resolve `all` (roles_of_all) and duplicates, in START_ORDER; raises ValueError naming unknown roles."""
    unknown = [r for r in requested if r != "all" and r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r}; valid roles: {', '.join([*ROLES, 'all'])}")
    wanted = set(roles_of_all(config)) if "all" in requested else set(requested)
    return [r for r in START_ORDER if r in wanted]
