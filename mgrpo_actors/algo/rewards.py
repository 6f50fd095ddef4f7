"""Main and sub-agent rewards, docs/method.md §Rewards.

Vectorised over any shape: pass arrays (one entry per rollout or per sub call) or scalars.
Every input must have the same shape; nothing is broadcast silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import structlog

from mgrpo_actors.algo.config import RewardConfig

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SubRewardWeights:
    """β1, β2, β3 as used for R_S after deciding whether an expert scorer exists."""

    beta_format: float
    beta_correct: float
    beta_expert: float
    # True when no expert scorer is configured and β3 was added to β2.
    expert_folded: bool


def resolve_sub_weights(
    cfg: RewardConfig, expert_configured: bool, reason: str = "no expert scorer configured"
) -> SubRewardWeights:
    """The β weights for R_S; without an expert scorer β3 is folded into β2 and the log says so.

    docs/method.md §Rewards: "with no scorer configured, its weight is folded into β2 and the run says so
    in its log". Call this once at start-up and reuse the result. `reason`: why there is no expert
    score, for the log.
    """
    if expert_configured:
        return SubRewardWeights(cfg.beta_format, cfg.beta_correct, cfg.beta_expert, expert_folded=False)
    folded = cfg.beta_correct + cfg.beta_expert
    log.warning(
        "sub_reward_expert_folded",
        reason=reason,
        beta_expert=cfg.beta_expert,
        beta_correct_before=cfg.beta_correct,
        beta_correct_after=folded,
    )
    return SubRewardWeights(cfg.beta_format, folded, 0.0, expert_folded=True)


def _as_score(name: str, value: npt.ArrayLike) -> np.ndarray:
    """A float array of scores in [0, 1]; NaN or out-of-range entries are a ValueError naming where."""
    array = np.asarray(value, dtype=np.float64)
    bad_nan = np.flatnonzero(~np.isfinite(array))
    if bad_nan.size:
        raise ValueError(f"{name} has non-finite value(s) at flat index {bad_nan[:5].tolist()}")
    bad_range = np.flatnonzero((array < 0.0) | (array > 1.0))
    if bad_range.size:
        index = bad_range[:5].tolist()
        values = array.ravel()[index].tolist()
        raise ValueError(f"{name} must lie in [0, 1]; out of range at flat index {index}: {values}")
    return array


def _as_flag(name: str, value: npt.ArrayLike) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.bool_:
        raise ValueError(f"{name} must be boolean (format valid or not), got dtype {array.dtype}")
    return array


def _require_same_shape(**arrays: np.ndarray) -> None:
    shapes = {name: array.shape for name, array in arrays.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"reward inputs must have the same shape, got {shapes}")


def main_reward(format_ok: npt.ArrayLike, r_correct: npt.ArrayLike, cfg: RewardConfig) -> np.ndarray:
    """R_M = α1·r_format + α2·r_correct if M's format is valid, else 0 (docs/method.md §Rewards)."""
    ok = _as_flag("format_ok", format_ok)
    correct = _as_score("r_correct", r_correct)
    _require_same_shape(format_ok=ok, r_correct=correct)
    r_format = ok.astype(np.float64)
    # docs/method.md §Rewards: the whole reward is 0 on invalid format, not only the format term.
    return np.where(ok, cfg.alpha_format * r_format + cfg.alpha_correct * correct, 0.0)


def sub_reward(
    format_ok: npt.ArrayLike, main_correct: npt.ArrayLike, r_expert: npt.ArrayLike | None, weights: SubRewardWeights
) -> np.ndarray:
    """R_S = β1·r_format(S) + β2·r_correct(M) + β3·r_expert if S's own format is valid, else 0.

    docs/method.md §Rewards. `main_correct` is M's correctness in the rollout the call belongs to, copied to
    every S call of it. `r_expert` is None exactly when the weights were resolved without a scorer.
    """
    ok = _as_flag("format_ok", format_ok)
    correct = _as_score("main_correct", main_correct)
    if weights.expert_folded:
        if r_expert is not None:
            raise ValueError("r_expert given, but the weights were resolved without an expert scorer (β3 folded)")
        expert = np.zeros_like(correct)
        _require_same_shape(format_ok=ok, main_correct=correct)
    else:
        if r_expert is None:
            raise ValueError("r_expert is None, but an expert scorer is configured (β3 > 0 is not folded)")
        expert = _as_score("r_expert", r_expert)
        _require_same_shape(format_ok=ok, main_correct=correct, r_expert=expert)
    r_format = ok.astype(np.float64)
    total = weights.beta_format * r_format + weights.beta_correct * correct + weights.beta_expert * expert
    return np.where(ok, total, 0.0)


def main_correct_for_sub(main_format_ok: npt.ArrayLike, main_r_correct: npt.ArrayLike) -> np.ndarray:
    """r_correct(M) as R_S uses it: M's r_correct where M's format is valid, else 0.

    docs/method.md §Rewards [ours]: S is not paid for an answer M never validly gave (the reference code
    derives S's reward from R_M, which is 0 on invalid format). Vectorised; same shapes in and out.
    """
    ok = _as_flag("main_format_ok", main_format_ok)
    correct = _as_score("main_r_correct", main_r_correct)
    _require_same_shape(main_format_ok=ok, main_r_correct=correct)
    return np.where(ok, correct, 0.0)
