"""What a node checks before it connects: the roles fit the run's method, the inputs they read are usable
(mgrpo_actors/preflight.py), and which learner a launcher's rank > 0 follows."""

from __future__ import annotations

import os

from actors.roles import SUB_SIDE_ROLES, role_user
from mgrpo_actors.config import NodeConfig

__all__ = ["follower_side", "preflight"]


def preflight(config: NodeConfig, roles: list[str], sub_types: tuple[str, ...] | None = None) -> None:
    """What can be checked before connecting (ValueError naming the key): an agent that does not train has no
    learner; a single-agent run has no sub side; the datasets and models the roles read are usable, and a
    controller's dataset fills a step (mgrpo_actors/preflight.py). sub_types: those the sub-side roles serve
    (None: every type of the run)."""
    served = sub_types or config.sub_types
    for role in roles:
        if role in SUB_SIDE_ROLES and len(config.sides) == 1:
            raise ValueError(f"run.method is single-agent: there is no sub-agent, so no {role} runs")
    if "main-learner" in roles and not config.trains("main"):
        raise ValueError(f"{_why_frozen(config, 'main')}: the main agent does not train, so no main-learner runs")
    if "sub-learner" in roles and not any(config.trains(t) for t in served):
        why = _why_frozen(config, served[0])
        raise ValueError(f"{why}: no sub-agent type of {', '.join(served)} trains, so no sub-learner runs")
    _user_serves_its_type(config, roles, served)
    # the datasets and models these roles read (mgrpo_actors/preflight.py): no role starts on a bad input
    from mgrpo_actors.preflight import check_inputs

    check_inputs(config, roles, served)


def _user_serves_its_type(config: NodeConfig, roles: list[str], served: tuple[str, ...]) -> None:
    """A node running as a sub-agent type's rendered user (`searcher-agent`: mgrpo deploy nats-config) serves that
    type only: that user may touch nothing of another type's, so the node would fail on its first stream."""
    user = config.nats.auth.user
    typed = {role_user(role, t): (role, t) for role in SUB_SIDE_ROLES for t in config.sub_types}
    if user not in typed:
        return
    role, sub_type = typed[user]
    if any(r in SUB_SIDE_ROLES for r in roles) and served != (sub_type,):
        raise ValueError(
            f"nats.auth.user {user} is the user of {role} for the sub-agent type {sub_type} only: start the node with "
            f"--role {role} --sub-type {sub_type}"
        )


def _why_frozen(config: NodeConfig, side: str) -> str:
    if config.learner(side).frozen:
        return f"{_learner_key(config, side)}.frozen is true"
    return f"run.method is {config.run.method}"


def _learner_key(config: NodeConfig, side: str) -> str:
    if side in config.learners.subs:
        return f"learners.subs.{side}"
    return "learners.main" if side == "main" else "learners.sub"


def follower_side(roles: list[str], sub_types: tuple[str, ...] = ("sub",)) -> str | None:
    """Under a launcher with several ranks: the side of the learner that this rank > 0 follows (a sub-learner's:
    its one sub-agent type); None on rank 0 or without a launcher. ValueError unless such a node runs exactly one
    learner role, for one side."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    if len(roles) != 1 or not roles[0].endswith("-learner"):
        raise ValueError(
            f"WORLD_SIZE={world}: a launcher's ranks run one learner role (main-learner or sub-learner), "
            f"not {', '.join(roles)}"
        )
    if roles[0] == "sub-learner" and len(sub_types) != 1:
        raise ValueError(
            f"WORLD_SIZE={world}: a launcher's ranks learn for one sub-agent type: give --sub-type (one of "
            f"{', '.join(sub_types)})"
        )
    side = "main" if roles[0] == "main-learner" else sub_types[0]
    return side if int(os.environ.get("RANK", "0")) > 0 else None
