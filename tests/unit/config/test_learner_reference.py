"""`learners.<side>.reference`, the KL term's reference policy: null (the starting weights) or a model spec,
refused when it cannot be used, when the config loads rather than when the learner starts or trains."""

from __future__ import annotations

import pytest

from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.config.learner import LearnerConfig
from mgrpo_actors.config.loader import ConfigError


def test_a_reference_loads_with_a_kl_term():
    config = load_config(
        NodeConfig, overrides=["algo.objective.kl_coef=0.05", "learners.sub.reference=runs/x/exports/sub/step10"]
    )
    assert config.learners.sub.reference == "runs/x/exports/sub/step10" and config.learners.main.reference is None


def test_a_reference_without_a_kl_term_is_refused_naming_both_keys():
    refused = r"learners\.main\.reference is 'tiny:main', but algo\.objective\.kl_coef is 0"
    with pytest.raises(ConfigError, match=refused):
        load_config(NodeConfig, overrides=["learners.main.reference=tiny:main"])


@pytest.mark.parametrize("value", ["", "  ", 3])
def test_an_empty_or_non_string_reference_is_refused(value):
    with pytest.raises(ValueError, match="learner reference must be a model spec or null"):
        LearnerConfig(reference=value)


def test_the_unaligned_ablation_needs_room_for_its_carried_samples():
    from mgrpo_actors.config import ConfigError, NodeConfig, load_config

    with pytest.raises(ConfigError, match="max_staleness must be >= 1"):
        load_config(NodeConfig, None, ["algo.alignment.mode=none", "pipeline.max_staleness=0"])
    load_config(NodeConfig, None, ["algo.alignment.mode=none-per-step", "pipeline.max_staleness=0"])
