"""The M-GRPO math (../shared/docs/m-grpo.md): rewards, judges, format check, group advantages,
trajectory alignment and the clipped objective. Pure logic: no NATS, no model."""

from mgrpo_actors.algo.advantages import (
    GroupStatistics,
    broadcast_to_tokens,
    group_advantages,
    group_statistics,
    main_advantages,
    sub_advantages,
)
from mgrpo_actors.algo.alignment import AlignedBatch, DEstimator, Slot, SlotKind, align
from mgrpo_actors.algo.config import (
    AdvantageConfig,
    AlgoConfig,
    AlignmentConfig,
    JudgeConfig,
    ObjectiveConfig,
    RewardConfig,
)
from mgrpo_actors.algo.format_check import FormatCheck, r_format, trajectory_format_ok
from mgrpo_actors.algo.judge import Judge, JudgeError, OpenAICompatibleJudge, Verdict, parse_score_reply
from mgrpo_actors.algo.objective import PolicyLossStats, clipped_policy_loss, kl_estimate, loss_denominator
from mgrpo_actors.algo.rewards import SubRewardWeights, main_reward, resolve_sub_weights, sub_reward
from mgrpo_actors.algo.scorers import (
    ContainsReferenceJudge,
    ExactMatchJudge,
    TokenF1Judge,
    contains_reference,
    exact_match,
    normalize_answer,
    token_f1,
)

__all__ = [
    "AdvantageConfig",
    "AlgoConfig",
    "AlignedBatch",
    "AlignmentConfig",
    "ContainsReferenceJudge",
    "DEstimator",
    "ExactMatchJudge",
    "FormatCheck",
    "GroupStatistics",
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "ObjectiveConfig",
    "OpenAICompatibleJudge",
    "PolicyLossStats",
    "RewardConfig",
    "Slot",
    "SlotKind",
    "SubRewardWeights",
    "TokenF1Judge",
    "Verdict",
    "align",
    "broadcast_to_tokens",
    "clipped_policy_loss",
    "contains_reference",
    "exact_match",
    "group_advantages",
    "group_statistics",
    "kl_estimate",
    "loss_denominator",
    "main_advantages",
    "main_reward",
    "normalize_answer",
    "parse_score_reply",
    "r_format",
    "resolve_sub_weights",
    "sub_advantages",
    "sub_reward",
    "token_f1",
    "trajectory_format_ok",
]
