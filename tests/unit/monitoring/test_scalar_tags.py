"""TensorBoard tags: a role with one process per run (controller, each side's aligner and learner, a sub-agent
type's included) needs no node in its tag; a role that scales out (agents, tools) does."""

from __future__ import annotations

import pytest

from mgrpo_actors.monitoring.exporters import scalar_tag
from protocols import Metric


@pytest.mark.parametrize("role", ["controller", "main-aligner", "sub-aligner", "sub-learner", "searcher-learner"])
def test_one_per_run_roles_are_tagged_without_their_node(role):
    assert scalar_tag(Metric(name="searcher.reward_mean", value=1.0, node="n1", role=role)) == "searcher/reward_mean"


@pytest.mark.parametrize("role", ["main-agent", "sub-agent", "tool"])
def test_roles_that_scale_out_are_tagged_with_their_node(role):
    metric = Metric(name="sub_agent.subtasks", value=1.0, node="n1", role=role, tags={"sub_type": "calculator"})
    assert scalar_tag(metric) == "sub_agent/subtasks/sub_type=calculator/n1"
