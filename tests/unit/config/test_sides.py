"""The config's sides (issue 22, 1 + n): M and its sub-agent types, each side's agent and learner config reached
through one accessor, and which of them train under each method."""

from __future__ import annotations

import pytest

from mgrpo_actors.config import NodeConfig, from_dict


def _config(**sections) -> NodeConfig:
    return from_dict(NodeConfig, sections)


def test_a_default_run_has_m_and_the_one_default_sub_type():
    config = _config()
    assert config.sub_types == ("sub",)
    assert config.sides == ("main", "sub")
    assert config.agent("main") is config.agents.main and config.agent("sub") is config.agents.sub
    assert config.learner("main") is config.learners.main and config.learner("sub") is config.learners.sub


def test_an_unknown_side_is_named_with_the_sides_there_are():
    config = _config()
    with pytest.raises(ValueError, match="no agent 'searcher': the config has main, sub"):
        config.agent("searcher")
    with pytest.raises(ValueError, match="no learner 'searcher': the config has main, sub"):
        config.learner("searcher")


@pytest.mark.parametrize(
    ("method", "frozen_sub", "sides", "trained"),
    [
        ("m-grpo", False, ("main", "sub"), ("main", "sub")),
        ("m-grpo", True, ("main", "sub"), ("main",)),
        ("main-only", False, ("main", "sub"), ("main",)),
        ("single-agent", False, ("main",), ("main",)),
    ],
)
def test_which_sides_train(method, frozen_sub, sides, trained):
    config = _config(run={"method": method}, learners={"sub": {"frozen": frozen_sub}})
    assert config.sides == sides
    assert tuple(side for side in ("main", "sub") if config.trains(side)) == trained
