"""`RolloutConfig`: everything that shapes the K rollouts of a question besides models, tools and seed:
both agents' budgets and sampling, the reward weights and the judges (docs/method.md §Rewards). Built from
the node config by agents/setup.py `rollout_config`."""

from __future__ import annotations

from dataclasses import dataclass, field

from mgrpo_actors.algo.config import RewardConfig
from mgrpo_actors.algo.judge import Judge
from mgrpo_actors.algo.scorers import ContainsReferenceJudge, ExactMatchJudge
from mgrpo_actors.config.agents import AgentConfig

__all__ = ["RolloutConfig"]


@dataclass(frozen=True)
class RolloutConfig:
    """Everything that shapes the K rollouts of a question besides models, tools and seed."""

    main: AgentConfig = field(default_factory=AgentConfig)  # M's budgets and sampling (or the single agent's)
    sub: AgentConfig = field(default_factory=AgentConfig)  # S's budgets and sampling
    rewards: RewardConfig = field(default_factory=RewardConfig)  # α and β (docs/method.md §Rewards)
    # M's r_correct: scores M's answer against the gold answer and its aliases (best of them).
    correct: Judge = field(default_factory=ExactMatchJudge)
    # S's r_expert: scores S's findings against scoring.expert_references(question) (best of them); the
    # default is the local rule "did S's result contain the evidence"; None: no expert judge, β3 is folded
    # into β2 (docs/method.md §Rewards [ours]), as it is for a question without evidence.
    expert: Judge | None = field(default_factory=ContainsReferenceJudge)

    def __post_init__(self) -> None:
        if not isinstance(self.correct, Judge):
            raise TypeError(f"rollout correct judge must follow algo.judge.Judge, got {type(self.correct).__name__}")
        if self.expert is not None and not isinstance(self.expert, Judge):
            got = type(self.expert).__name__
            raise TypeError(f"rollout expert judge must follow algo.judge.Judge or be None, got {got}")
