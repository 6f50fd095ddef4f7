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
    later = {"worlds", "all_tokens", "pages", "micro_batch", "lr_ramp_steps", "lr_decay", "max_grad_norm", "sub_steps"}
    later |= {"copy_steps", "copies"}
    assert not later & set(settings)
    assert {"steps", "questions", "kinds", "batch_size", "lr", "seed", "dtype"} <= set(settings)
    pretrained = dataclasses.replace(
        config, warmup=dataclasses.replace(config.warmup, worlds=2, pages=0.3, micro_batch=8)
    )
    assert _warmup_settings(pretrained) == {**settings, "worlds": 2, "pages": 0.3, "micro_batch": 8}
    practised = dataclasses.replace(config, warmup=dataclasses.replace(config.warmup, copy_steps=100, copies=0.1))
    assert _warmup_settings(practised) == {**settings, "copy_steps": 100, "copies": 0.1}


def test_the_default_question_count_is_not_in_the_tools_key():
    import dataclasses

    from mgrpo_actors.config import NodeConfig
    from mgrpo_actors.warmup.cached import tools_settings

    config = NodeConfig()
    assert "web_questions" not in tools_settings(config) and "web_entities" in tools_settings(config)
    more = dataclasses.replace(config, tools=dataclasses.replace(config.tools, web_questions=4000))
    assert tools_settings(more)["web_questions"] == 4000
