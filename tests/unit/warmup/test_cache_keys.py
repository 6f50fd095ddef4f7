"""The warm start's and the pool probe's cache keys hold an agent's settings added later (a sub-agent type's
description and expert judge) only when set: the caches built before them stay valid."""

from __future__ import annotations

from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.warmup.cached import agent_settings


def test_unset_later_settings_are_not_in_the_key():
    settings = agent_settings(AgentConfig())
    assert "description" not in settings and "expert_judge" not in settings and settings["model"] == "smollm2"


def test_set_later_settings_change_the_key():
    described = agent_settings(AgentConfig(description="computes", expert_judge="none"))
    assert described["description"] == "computes" and described["expert_judge"] == "none"
    assert described != agent_settings(AgentConfig())


def test_warm_up_settings_added_later_enter_the_key_only_when_changed():
    import dataclasses

    from mgrpo_actors.config import NodeConfig
    from mgrpo_actors.warmup.cached import _warmup_settings

    config = NodeConfig()
    settings = _warmup_settings(config)
    assert not {"pages", "micro_batch", "lr_ramp_steps", "lr_decay", "max_grad_norm"} & set(settings)
    assert {"steps", "questions", "kinds", "batch_size", "lr", "seed", "dtype"} <= set(settings)
    pretrained = dataclasses.replace(config, warmup=dataclasses.replace(config.warmup, pages=0.3, micro_batch=8))
    assert _warmup_settings(pretrained) == {**settings, "pages": 0.3, "micro_batch": 8}
