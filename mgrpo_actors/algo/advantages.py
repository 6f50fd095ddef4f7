"""Group-relative advantages, docs/method.md §Group-relative advantages.

Main agent: one group of K rollouts per query, rewards shaped (B, K).
Sub-agent: after alignment, one group of all D·K aligned sub-trajectories per query, rewards shaped
(B, K, D) with a loss weight per slot; duplicates count, placeholders (weight 0) do not.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from mgrpo_actors.algo.config import AdvantageConfig


class GroupStatistics(NamedTuple):
    """Per-group reward statistics, each shaped (G,)."""

    mean: np.ndarray
    std: np.ndarray
    # Members that count (weight > 0).
    count: np.ndarray
    # True where the group carries no signal (std <= eps, or too few members) and advantages are 0.
    degenerate: np.ndarray


def _check_finite(rewards: np.ndarray, counted: np.ndarray) -> None:
    bad = np.argwhere(counted & ~np.isfinite(rewards))
    if bad.size:
        where = [tuple(int(i) for i in index) for index in bad[:5]]
        raise ValueError(f"rewards contain NaN or inf at (group, member) {where}")


def group_statistics(rewards: np.ndarray, counted: np.ndarray, cfg: AdvantageConfig) -> GroupStatistics:
    """Mean and std over the counted members of each row of a (G, N) array, vectorised."""
    ddof = 0 if cfg.std == "population" else 1
    count = counted.sum(axis=1)
    values = np.where(counted, rewards, 0.0)
    mean = values.sum(axis=1) / np.maximum(count, 1)
    squared = np.where(counted, (rewards - mean[:, None]) ** 2, 0.0)
    std = np.sqrt(squared.sum(axis=1) / np.maximum(count - ddof, 1))
    # docs/method.md §Group-relative advantages [ours]: std = 0 means no signal; eps is the only tolerance,
    # it is never added to std. A group needs two counted members to carry a relative signal (and an
    # unbiased std needs two to exist).
    degenerate = (count < 2) | (std <= cfg.eps)
    return GroupStatistics(mean=mean, std=std, count=count, degenerate=degenerate)


def group_advantages(rewards: npt.ArrayLike, counted: npt.ArrayLike, cfg: AdvantageConfig) -> np.ndarray:
    """A = (R − mean) / std per row of a (G, N) array over members with counted = True; 0 elsewhere.

    docs/method.md §Group-relative advantages. Uncounted members (alignment placeholders) neither enter
    the statistics nor receive an advantage ([ours]); their reward values are ignored.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    counted = np.asarray(counted, dtype=bool)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be 2-D (groups, members), got shape {rewards.shape}")
    if rewards.shape != counted.shape:
        raise ValueError(f"rewards shape {rewards.shape} does not match mask shape {counted.shape}")
    if rewards.shape[0] == 0 or rewards.shape[1] == 0:
        raise ValueError(f"empty groups: rewards shape {rewards.shape} (need at least one group with members)")
    _check_finite(rewards, counted)
    stats = group_statistics(rewards, counted, cfg)
    safe_std = np.where(stats.degenerate, 1.0, stats.std)
    advantages = (rewards - stats.mean[:, None]) / safe_std[:, None]
    return np.where(counted & ~stats.degenerate[:, None], advantages, 0.0)


def one_group_advantages(rewards: npt.ArrayLike, cfg: AdvantageConfig) -> np.ndarray:
    """A = (R − mean) / std over one group in which every member counts, shaped (N,) (group_advantages of one
    row): what a learner recomputes for a group of a batch (learner/batch_filters.py, batch_checks.py)."""
    row = np.asarray(rewards, dtype=np.float64)[None, :]
    return group_advantages(row, np.ones_like(row, dtype=bool), cfg)[0]


def main_advantages(rewards: npt.ArrayLike, cfg: AdvantageConfig) -> np.ndarray:
    """A_M for rewards shaped (B, K): one group of K rollouts per query (docs/method.md §Group-relative advantages)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"main rewards must be shaped (B, K), got shape {rewards.shape}")
    batch, k = rewards.shape
    if batch == 0:
        raise ValueError("main rewards: empty batch (B = 0)")
    if k < 2:
        raise ValueError(f"main rewards: K = {k}; a group needs K >= 2 rollouts to carry a relative signal")
    return group_advantages(rewards, np.ones_like(rewards, dtype=bool), cfg)


def sub_advantages(rewards: npt.ArrayLike, weights: npt.ArrayLike, cfg: AdvantageConfig) -> np.ndarray:
    """A_S for aligned rewards shaped (B, K, D): all D·K slots of a query form one group.

    docs/method.md §Group-relative advantages: duplicates count. Slots with weight 0 (placeholders) are
    left out of the statistics and get advantage 0 ([ours]). K = 1 is allowed: a query whose group has
    fewer than 2 counted slots (or std <= eps) is degenerate and gets advantages 0. Returns (B, K, D).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if rewards.ndim != 3:
        raise ValueError(f"sub rewards must be shaped (B, K, D), got shape {rewards.shape}")
    if rewards.shape != weights.shape:
        raise ValueError(f"sub rewards shape {rewards.shape} does not match weights shape {weights.shape}")
    batch, k, d = rewards.shape
    if batch == 0 or k == 0 or d == 0:
        raise ValueError(f"sub rewards: empty groups, shape (B, K, D) = {rewards.shape}")
    # docs/method.md §Group-relative advantages [ours]: K = 1 is allowed for S, the group being the query's
    # counted slots; one with fewer than 2 counted members is degenerate (group_statistics gives 0).
    flat = group_advantages(rewards.reshape(batch, k * d), weights.reshape(batch, k * d) > 0, cfg)
    return flat.reshape(batch, k, d)
