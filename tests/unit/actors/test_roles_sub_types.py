"""The role table with several sub-agent types (issue 22, 1 + n; actors/roles.py): which types a node's sub-side
roles serve (--sub-type), the streams a role uses per type, a sub-side role started once per type, and when the
sub-learner has no work."""

from __future__ import annotations

import pytest

from actors.roles import ROLES, RoleSpec, expand_roles, node_sub_types, role_streams, unused_roles
from mgrpo_actors.config import NodeConfig, load_config

TWO_TYPES = [
    "agents.subs.searcher.model=tiny:sub",
    "tools.serve=[search, visit, calculator]",
    "agents.subs.calculator.tools=[calculator]",
    "agents.subs.calculator.description=computes",
]
TWO = ("searcher", "calculator")

# What each start function of this module was called with: (config, sub_type or None).
STARTS: list[tuple[NodeConfig, str | None]] = []


def record_start(bus, config, started, sub_type=None):
    """A role's start function: records its call and the actor it "started"."""
    STARTS.append((config, sub_type))
    started.append(f"actor-{sub_type or 'main'}")


def _two_types(*more: str) -> NodeConfig:
    return load_config(NodeConfig, None, [*TWO_TYPES, *more])


@pytest.fixture(autouse=True)
def _no_starts_yet():
    STARTS.clear()


# ---- node_sub_types -------------------------------------------------------------------------------------------


def test_a_node_serves_every_type_of_the_run_unless_told_otherwise():
    assert node_sub_types(_two_types()) == TWO
    assert node_sub_types(_two_types(), []) == TWO
    assert node_sub_types(NodeConfig()) == ("sub",)


def test_a_node_serves_the_requested_types_once_each_in_the_order_given():
    assert node_sub_types(_two_types(), ["calculator"]) == ("calculator",)
    assert node_sub_types(_two_types(), ["calculator", "searcher", "calculator"]) == ("calculator", "searcher")


def test_an_unknown_requested_type_is_refused_naming_the_configs_types():
    with pytest.raises(ValueError, match="--sub-type 'reader': the config's sub-agent types are searcher, calculator"):
        node_sub_types(_two_types(), ["searcher", "reader"])
    with pytest.raises(ValueError, match="the config's sub-agent types are sub$"):
        node_sub_types(NodeConfig(), ["searcher"])


# ---- role_streams ---------------------------------------------------------------------------------------------


def test_the_one_type_run_keeps_the_streams_it_had():
    assert role_streams(["sub-aligner"]) == ["metrics", "dlq", "steps", "stats", "traj-sub", "batch-sub"]
    assert role_streams(["sub-aligner"], ("sub",)) == role_streams(["sub-aligner"])
    assert role_streams(["main-agent", "sub-agent", "sub-learner"]) == [
        "metrics",
        "dlq",
        "rollouts",
        "traj-main",
        "stats",
        "traj-sub",
        "batch-sub",
        "steps",
    ]


def test_a_sub_side_stream_is_one_per_type():
    assert role_streams(["sub-aligner"], TWO) == [
        "metrics",
        "dlq",
        "steps",
        "stats-searcher",
        "stats-calculator",
        "traj-searcher",
        "traj-calculator",
        "batch-searcher",
        "batch-calculator",
    ]
    assert role_streams(["sub-agent"], ("calculator",)) == ["metrics", "dlq", "traj-calculator"]


def test_the_main_agent_writes_every_types_reward_statistics_and_main_streams_stay_single():
    streams = role_streams(["main-agent", "main-aligner", "main-learner", "controller"], TWO)
    assert streams == [
        "metrics",
        "dlq",
        "rollouts",
        "traj-main",
        "stats-searcher",
        "stats-calculator",
        "steps",
        "batch-main",
    ]
    assert not [name for name in streams if name.endswith("-sub") or name == "stats"]


# ---- RoleSpec.start_actors ------------------------------------------------------------------------------------


def test_a_sub_side_role_starts_once_per_type_it_serves_and_is_given_the_type():
    spec = RoleSpec("x", "a sub-side role", start=f"{__name__}:record_start", per_sub_type=True)
    config, started = _two_types(), []
    spec.start_actors(object(), config, started, TWO)
    assert STARTS == [(config, "searcher"), (config, "calculator")]
    assert started == ["actor-searcher", "actor-calculator"]


def test_a_main_side_role_starts_once_without_a_type():
    spec = RoleSpec("x", "a main-side role", start=f"{__name__}:record_start")
    config, started = _two_types(), []
    spec.start_actors(object(), config, started, TWO)
    assert STARTS == [(config, None)] and started == ["actor-main"]


def test_the_sub_side_roles_of_the_table_are_the_per_type_ones():
    assert {name for name, spec in ROLES.items() if spec.per_sub_type} == {"sub-agent", "sub-aligner", "sub-learner"}


# ---- unused_roles ---------------------------------------------------------------------------------------------


def test_the_sub_learner_has_work_while_any_type_trains():
    assert "sub-learner" not in unused_roles(_two_types())
    assert "sub-learner" not in unused_roles(_two_types("learners.subs.calculator.frozen=true"))
    assert "sub-learner" in expand_roles(["all"], _two_types("learners.subs.calculator.frozen=true"))


def test_the_sub_learner_is_unused_once_no_type_trains():
    both_frozen = _two_types("learners.subs.calculator.frozen=true", "learners.subs.searcher.frozen=true")
    assert unused_roles(both_frozen) == {"sub-learner"}
    assert unused_roles(_two_types("run.method=main-only")) == {"sub-learner"}
    assert "sub-learner" not in expand_roles(["all"], _two_types("run.method=main-only"))


def test_no_role_is_named_after_a_type():
    unused = unused_roles(_two_types("learners.subs.calculator.frozen=true"))
    assert unused <= set(ROLES), unused


def test_a_sub_type_for_a_node_without_sub_side_roles_is_refused_not_ignored():
    with pytest.raises(ValueError, match="--sub-type chooses what sub-agent, sub-aligner and sub-learner serve"):
        node_sub_types(_two_types(), ["searcher"], ["main-agent", "tool"])
    assert node_sub_types(_two_types(), ["searcher"], ["tool", "sub-agent"]) == ("searcher",)


def test_a_node_makes_the_streams_of_the_types_it_serves_and_the_main_agent_every_types_statistics():
    from actors.roles import node_streams

    assert node_streams(["sub-agent", "tool"], TWO, ("searcher",)) == ["metrics", "dlq", "traj-searcher"]
    main = node_streams(["main-agent", "sub-aligner"], TWO, ("calculator",))
    assert {"stats-searcher", "stats-calculator", "traj-calculator"} <= set(main) and "traj-searcher" not in main
