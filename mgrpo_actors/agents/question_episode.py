"""The episode of an agent that answers a question (M, or the single agent): the part both share."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.episode import AgentEpisode
from mgrpo_actors.agents.prompts import opening_messages
from mgrpo_actors.config.agents import AgentConfig

__all__ = ["question_episode"]


def question_episode(
    question: str,
    tokenizer: PreTrainedTokenizerBase,
    cfg: AgentConfig,
    rollout_index: int,
    system_prompt: str,
    demonstration: Sequence[dict[str, str]],
    tool_names: Sequence[str],
    episode_id: str | None = None,
) -> AgentEpisode:
    """Rollout `rollout_index` of `question`; its id is `episode_id` (default "r<rollout_index>"), the
    prefix of its call ids. cfg.system_prompt, if set, wins."""
    return AgentEpisode(
        tokenizer,
        opening_messages(cfg.system_prompt or system_prompt, question, demonstration if cfg.demonstration else ()),
        cfg,
        episode_id=episode_id or f"r{rollout_index}",
        tool_names=tuple(tool_names),
        rollout_index=rollout_index,
    )
