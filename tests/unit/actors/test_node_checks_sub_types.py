"""A node's checks before it connects with several sub-agent types (actors/node_checks.py): a sub-learner for types
none of which train is refused naming the key, and a launcher's rank > 0 of a sub-learner follows its one type."""

from __future__ import annotations

import pytest

from actors.node_checks import follower_side, preflight
from mgrpo_actors.config import NodeConfig, load_config

# tiny:main / tiny:sub are built locally: check_inputs loads them without a download
TWO_TYPES = [
    "agents.main.model=tiny:main",
    "agents.sub.model=tiny:sub",
    "agents.subs.searcher.model=tiny:sub",
    "tools.serve=[search, visit, calculator]",
    "agents.subs.calculator.tools=[calculator]",
    "agents.subs.calculator.description=computes",
    "tools.web_entities=150",
]
TWO = ("searcher", "calculator")


def _two_types(*more: str) -> NodeConfig:
    return load_config(NodeConfig, None, [*TWO_TYPES, *more])


# ---- preflight ------------------------------------------------------------------------------------------------


def test_a_sub_learner_for_a_frozen_type_is_refused_naming_its_key():
    config = _two_types("learners.subs.calculator.frozen=true")
    with pytest.raises(
        ValueError,
        match=r"^learners\.subs\.calculator\.frozen is true: no sub-agent type of calculator trains, so no sub-learner",
    ):
        preflight(config, ["sub-learner"], ("calculator",))


def test_a_sub_learner_for_types_that_all_take_a_frozen_learners_sub_names_learners_sub():
    config = _two_types("learners.sub.frozen=true")
    with pytest.raises(ValueError, match=r"^learners\.sub\.frozen is true: no sub-agent type of searcher, calculator"):
        preflight(config, ["sub-learner"], TWO)


def test_a_sub_learner_under_main_only_is_refused_naming_the_method():
    with pytest.raises(ValueError, match=r"^run\.method is main-only: no sub-agent type of searcher, calculator"):
        preflight(_two_types("run.method=main-only"), ["sub-learner"], None)


def test_a_sub_learner_serving_a_type_that_trains_passes():
    config = _two_types("learners.subs.calculator.frozen=true")
    preflight(config, ["sub-learner"], ("searcher",))
    preflight(config, ["sub-learner"], None)  # every type: the searcher trains
    preflight(config, ["sub-learner"], TWO)


def test_the_other_sub_side_roles_of_a_frozen_type_still_run():
    config = _two_types("learners.subs.calculator.frozen=true")
    preflight(config, ["sub-agent"], ("calculator",))


# ---- follower_side --------------------------------------------------------------------------------------------


@pytest.fixture
def launcher(monkeypatch):
    """Set the launcher's WORLD_SIZE and RANK."""

    def ranks(world: int, rank: int) -> None:
        monkeypatch.setenv("WORLD_SIZE", str(world))
        monkeypatch.setenv("RANK", str(rank))

    return ranks


def test_a_sub_learners_rank_above_0_follows_its_one_type(launcher):
    launcher(2, 1)
    assert follower_side(["sub-learner"], ("calculator",)) == "calculator"
    assert follower_side(["sub-learner"]) == "sub"
    assert follower_side(["main-learner"], TWO) == "main"


def test_rank_0_follows_nothing(launcher):
    launcher(2, 0)
    assert follower_side(["sub-learner"], ("calculator",)) is None


def test_a_sub_learner_of_several_types_under_a_launcher_asks_for_sub_type(launcher):
    launcher(2, 1)
    with pytest.raises(ValueError, match=r"give --sub-type \(one of searcher, calculator\)"):
        follower_side(["sub-learner"], TWO)


def test_without_a_launcher_several_types_are_fine(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert follower_side(["sub-learner"], TWO) is None


@pytest.mark.parametrize(
    ("user", "roles", "served", "refused"),
    [
        ("searcher-agent", ["sub-agent"], ("searcher",), False),
        ("searcher-agent", ["sub-agent"], TWO, True),  # no --sub-type: it would serve the calculator too
        ("calculator-learner", ["sub-learner"], ("searcher",), True),
        ("main-agent", ["main-agent"], TWO, False),  # not a sub-agent type's user
        ("", ["sub-agent"], TWO, False),  # no credentials: an unsecured server
    ],
)
def test_a_node_running_as_a_types_user_serves_that_type_only(user, roles, served, refused, monkeypatch):
    """A node whose NATS user is a sub-agent type's rendered one (`searcher-agent`) must serve that type alone: the
    user may touch nothing of another type's, so the check says which --sub-type to give before anything starts."""
    monkeypatch.setenv("MGRPO_TEST_PASSWORD", "secret")
    auth = [f"nats.auth.user={user}", "nats.auth.password_env=MGRPO_TEST_PASSWORD"] if user else []
    config = _two_types(*auth)
    if not refused:
        preflight(config, roles, served)
        return
    with pytest.raises(ValueError, match=r"is the user of sub-(agent|learner) for the sub-agent type \w+ only: start"):
        preflight(config, roles, served)
