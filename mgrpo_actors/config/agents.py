"""The `agents` section of the node config: M's and S's models, budgets and sampling, and the judges
that score them (m-grpo.md §The system being trained, §Rewards)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mgrpo_actors.agents.config import AgentConfig
from mgrpo_actors.algo.config import JudgeConfig

__all__ = ["AgentsConfig", "cpu_agent"]


def cpu_agent() -> AgentConfig:
    """Budgets sized for CPU runs of small models ([ours]); the paper's are max_turns 20, 512 tokens per
    turn, temperature 1.0 (AgentConfig's own defaults). Untrained SmolLM2 needs temperature 0.5 and its
    worked example to produce tool calls at all."""
    return AgentConfig(max_turns=3, max_new_tokens_per_turn=64, max_context_tokens=4096, temperature=0.5)


@dataclass(frozen=True)
class AgentsConfig:
    """Both agents of the vertical system; each is a different LLM with its own engine."""

    main: AgentConfig = field(default_factory=cpu_agent)  # the main agent M (planner)
    sub: AgentConfig = field(default_factory=cpu_agent)  # the sub-agent S (tool-using executor)
    # r_correct of M's answer against the gold answers
    correct_judge: Literal["exact-match", "numeric-match", "token-f1", "llm"] = "exact-match"
    # r_expert of S's findings; none folds β3 into β2
    expert_judge: Literal["contains-reference", "llm", "none"] = "contains-reference"
    llm_judge: JudgeConfig | None = None  # the OpenAI-compatible endpoint used where a judge is "llm"
    torch_threads: int = 1  # torch CPU threads per process (more is often slower on shared cores)

    def __post_init__(self) -> None:
        if "llm" in (self.correct_judge, self.expert_judge) and self.llm_judge is None:
            raise ValueError("agents.llm_judge (base_url, model) is required when a judge is 'llm'")
        if self.sub.tools is not None:
            raise ValueError(
                "agents.sub.tools must stay null: S's tools are search and visit; only the single agent (agents.main under run.method single-agent) chooses its tools"
            )
        if self.torch_threads < 1:
            raise ValueError(f"agents.torch_threads must be >= 1, got {self.torch_threads}")
