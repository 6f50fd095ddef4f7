"""The single agent, the baseline of m-grpo.md §Training schedule: one agent with every tool (search, visit,
reason) and no sub-agent. Its loop is AgentEpisode's; it is scored like M."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.config import AgentConfig
from mgrpo_actors.agents.episode import AgentEpisode
from mgrpo_actors.agents.prompts import SINGLE_DEMONSTRATION, single_system_prompt
from mgrpo_actors.agents.question_episode import question_episode
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = ["SINGLE_TOOLS", "single_episode", "single_tools"]

SINGLE_TOOLS = ("search", "visit", "reason")


def single_tools(tools: ToolRegistry) -> ToolRegistry:
    """The tools of `tools` that the single agent may call (those of SINGLE_TOOLS it has)."""
    return tools.subset(name for name in SINGLE_TOOLS if name in tools)


def single_episode(
    question: str,
    tokenizer: PreTrainedTokenizerBase,
    tools: ToolRegistry,
    cfg: AgentConfig,
    rollout_index: int,
    episode_id: str | None = None,
) -> AgentEpisode:
    """The single agent's episode for rollout `rollout_index` of `question`; its id is `episode_id` (default "r<rollout_index>")."""
    own_tools = single_tools(tools)
    return question_episode(
        question, tokenizer, cfg, rollout_index, single_system_prompt(own_tools), SINGLE_DEMONSTRATION, own_tools.names, episode_id
    )
