"""The single agent, the baseline of docs/method.md §Training schedule: one agent with every tool (search, visit,
reason) and no sub-agent. Its loop is AgentEpisode's; it is scored like M.

`agents.main.tools` narrows its tools; with none (`[]`) it is plain GRPO: the prompt is PLAIN_PROMPT and
the question, without a demonstration, and with `max_turns: 1` the one turn is the completion the
correct judge scores.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.episode import AgentEpisode
from mgrpo_actors.agents.prompts import PLAIN_PROMPT, SINGLE_DEMONSTRATION, single_system_prompt
from mgrpo_actors.agents.question_episode import question_episode
from mgrpo_actors.config.agents import SINGLE_AGENT_TOOLS, AgentConfig
from mgrpo_actors.tools.registry import ToolRegistry

__all__ = ["SINGLE_TOOLS", "single_episode", "single_tool_names", "single_tools"]

SINGLE_TOOLS = SINGLE_AGENT_TOOLS


def single_tool_names(cfg: AgentConfig) -> tuple[str, ...]:
    """The tools the single agent is given: `cfg.tools` (agents.main.tools), all of SINGLE_TOOLS when unset."""
    return SINGLE_TOOLS if cfg.tools is None else tuple(dict.fromkeys(cfg.tools))


def single_tools(tools: ToolRegistry, names: Sequence[str] = SINGLE_TOOLS) -> ToolRegistry:
    """The tools of `tools` that the single agent may call (those of `names` it has)."""
    return tools.subset(name for name in names if name in tools)


def single_episode(
    question: str,
    tokenizer: PreTrainedTokenizerBase,
    tools: ToolRegistry,
    cfg: AgentConfig,
    rollout_index: int,
    episode_id: str | None = None,
) -> AgentEpisode:
    """The single agent's episode for rollout `rollout_index` of `question`; its id is `episode_id`
    (default "r<rollout_index>")."""
    names = single_tool_names(cfg)
    if not names:  # plain GRPO: nothing to demonstrate but the answer block, which the prompt states
        return question_episode(question, tokenizer, cfg, rollout_index, PLAIN_PROMPT, (), (), episode_id)
    own_tools = single_tools(tools, names)
    return question_episode(
        question,
        tokenizer,
        cfg,
        rollout_index,
        single_system_prompt(own_tools),
        SINGLE_DEMONSTRATION,
        own_tools.names,
        episode_id,
    )
