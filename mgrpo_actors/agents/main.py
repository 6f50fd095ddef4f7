"""The main agent M: plans, calls `reason`, delegates `{task, context}` to sub-agents, reads their results,
answers (docs/method.md §The system being trained). Its loop is AgentEpisode's; this module says which
tools M has and what it is asked."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.delegation import ONE_TYPE, Delegates
from mgrpo_actors.agents.episode import AgentEpisode
from mgrpo_actors.agents.prompts import main_demonstration, main_system_prompt
from mgrpo_actors.agents.question_episode import question_episode
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = ["MAIN_REGISTRY_TOOLS", "main_episode", "main_tools"]

MAIN_REGISTRY_TOOLS = ("reason",)  # M's tools that a ToolExecutor runs; delegate tools go to the Delegate callback


def main_tools(tools: ToolRegistry) -> ToolRegistry:
    """The tools of `tools` that M may call (those of MAIN_REGISTRY_TOOLS it has)."""
    return tools.subset(name for name in MAIN_REGISTRY_TOOLS if name in tools)


def main_episode(
    question: str,
    tokenizer: PreTrainedTokenizerBase,
    tools: ToolRegistry,
    cfg: AgentConfig,
    rollout_index: int,
    episode_id: str | None = None,
    delegates: Delegates = ONE_TYPE,
) -> AgentEpisode:
    """M's episode for rollout `rollout_index` of `question`, delegating with `delegates` (one tool per sub-agent
    type); its id is `episode_id` (default "r<rollout_index>")."""
    own_tools = main_tools(tools)
    return question_episode(
        question,
        tokenizer,
        cfg,
        rollout_index,
        main_system_prompt(own_tools, delegates),
        main_demonstration(delegates.example) if delegates.example else (),
        (*own_tools.names, *delegates.names),
        episode_id,
    )
