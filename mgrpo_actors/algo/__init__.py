"""The M-GRPO math (../shared/docs/m-grpo.md): rewards, judges, format check, group advantages,
trajectory alignment and the clipped objective. Pure logic: no NATS, no model.

Names are imported on first use (PEP 562): the node config imports `algo.config` without pulling in
torch, which only advantages and the objective need.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "AdvantageConfig",
    "AlgoConfig",
    "AlignmentConfig",
    "AlignmentPlan",
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
    "SubKey",
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
    "main_correct_for_sub",
    "main_reward",
    "normalize_answer",
    "parse_score_reply",
    "r_format",
    "resolve_sub_weights",
    "sub_advantages",
    "sub_reward",
    "subtask_text",
    "token_f1",
    "trajectory_format_ok",
]

_WHERE = {
    "AdvantageConfig": "config",
    "AlgoConfig": "config",
    "AlignmentConfig": "config",
    "AlignmentPlan": "alignment",
    "ContainsReferenceJudge": "scorers",
    "DEstimator": "alignment",
    "ExactMatchJudge": "scorers",
    "FormatCheck": "format_check",
    "GroupStatistics": "advantages",
    "Judge": "judge",
    "JudgeConfig": "config",
    "JudgeError": "judge",
    "ObjectiveConfig": "config",
    "OpenAICompatibleJudge": "judge",
    "PolicyLossStats": "objective",
    "RewardConfig": "config",
    "Slot": "alignment",
    "SlotKind": "alignment",
    "SubKey": "alignment",
    "SubRewardWeights": "rewards",
    "TokenF1Judge": "scorers",
    "Verdict": "judge",
    "align": "alignment",
    "broadcast_to_tokens": "advantages",
    "clipped_policy_loss": "objective",
    "contains_reference": "scorers",
    "exact_match": "scorers",
    "group_advantages": "advantages",
    "group_statistics": "advantages",
    "kl_estimate": "objective",
    "loss_denominator": "objective",
    "main_advantages": "advantages",
    "main_correct_for_sub": "rewards",
    "main_reward": "rewards",
    "normalize_answer": "scorers",
    "parse_score_reply": "judge",
    "r_format": "format_check",
    "resolve_sub_weights": "rewards",
    "sub_advantages": "advantages",
    "sub_reward": "rewards",
    "subtask_text": "scorers",
    "token_f1": "scorers",
    "trajectory_format_ok": "format_check",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
