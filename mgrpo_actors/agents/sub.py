"""The sub-agent S: works on one delegated task with `search` and `visit` (a sub-agent type of agents.subs: with its
own tools), then returns a structured result (findings, evidence urls) that is all M sees of it (docs/method.md §The
system being trained).

S's `<answer>` may hold the JSON object `{"findings": "...", "evidence": ["url", ...]}`; any other answer
text is taken as the findings, with no evidence: what S visited is its transcript, which M never sees.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from mgrpo_actors.agents.delegation import DelegationRequest
from mgrpo_actors.agents.episode import AgentEpisode, EpisodeRecord
from mgrpo_actors.agents.prompts import SUB_DEMONSTRATION, opening_messages, sub_system_prompt, sub_user_message
from mgrpo_actors.config.agents import AgentConfig
from mgrpo_actors.tools.registry import ToolRegistry
from protocols.messages import SubtaskResult

__all__ = ["SUB_TOOLS", "sub_episode", "sub_tools", "subtask_result"]

SUB_TOOLS = ("search", "visit")
_STOP_REASONS = {"turns": "it used its turn budget", "context": "it used its context budget"}


def sub_tools(tools: ToolRegistry, names: Sequence[str] = SUB_TOOLS) -> ToolRegistry:
    """The tools of `tools` that S may call: those of `names` (a sub-agent type's tools; SUB_TOOLS by default) it
    has."""
    return tools.subset(name for name in names if name in tools)


def sub_episode(
    request: DelegationRequest,
    tokenizer: PreTrainedTokenizerBase,
    tools: ToolRegistry,
    cfg: AgentConfig,
    tool_names: Sequence[str] = SUB_TOOLS,
) -> AgentEpisode:
    """S's episode for one delegation, calling `tool_names` (its type's tools); its id is the delegation's call id.
    The worked example reads a page: only a sub-agent with search and visit opens with it."""
    own_tools = sub_tools(tools, tool_names)
    system_prompt = cfg.system_prompt or sub_system_prompt(own_tools)
    reads_pages = set(own_tools.names) == set(SUB_TOOLS)
    return AgentEpisode(
        tokenizer,
        opening_messages(
            system_prompt,
            sub_user_message(request.task, request.context),
            SUB_DEMONSTRATION if cfg.demonstration and reads_pages else (),
        ),
        cfg,
        episode_id=request.call_id,
        tool_names=own_tools.names,
        rollout_index=request.rollout_index,
    )


def _structured(answer: str) -> tuple[str, list[str]] | None:
    """(findings, evidence) if the answer is the JSON object S was asked for."""
    try:
        value = json.loads(answer)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("findings"), str):
        return None
    evidence = value.get("evidence", [])
    evidence = [url for url in evidence if isinstance(url, str)] if isinstance(evidence, list) else []
    return value["findings"].strip(), list(dict.fromkeys(evidence))


def subtask_result(record: EpisodeRecord) -> SubtaskResult:
    """What S returns to M for a finished episode (its call id is the episode id)."""
    if record.answer is None:
        reason = _STOP_REASONS.get(record.stop_reason, record.stop_reason)
        return SubtaskResult(
            call_id=record.episode_id,
            ok=False,
            findings="",
            error=f"it stopped after {len(record.turns)} turns without an answer: {reason}",
            num_turns=len(record.turns),
        )
    structured = _structured(record.answer)
    findings, evidence = structured if structured is not None else (record.answer, [])
    return SubtaskResult(
        call_id=record.episode_id, ok=True, findings=findings, evidence=evidence, num_turns=len(record.turns)
    )
