"""What a learner checks of a batch before training on it: that it is one its aligner could have built. A batch
that fails is dead-lettered with the reason and counted, never trained on (actors/learner.py).

- Its run and side are the learner's; its arrays agree with each other (one entry per sample, token arrays as
  long as the samples' lengths together).
- Its size is what the step requires: B·K samples for M, B·K·D for S with D the configured one (or, under
  `D: auto`, within [d_min, d_max]).
- Weights are 0 or 1; placeholders (weight 0) have advantage 0; every value is finite; a trained sample names
  one of the step's B advantage groups (a query, or under `alignment.mode: none` a chunk of K·D) and a policy
  version from 0 to the newest this side announced (an engine samples only with announced weights).
- Each group's advantages are the group normalisation of the batch's own rewards over the group's trained
  samples (docs/method.md §Group-relative advantages), recomputed here: a batch with an advantage of 1e6, or one
  whose advantages do not follow from its rewards, is refused. Where a group's rewards are too close together
  for float32 rewards to pin the z-scores down, only the bound every normalised value obeys is checked.
"""

from __future__ import annotations

import numpy as np

from mgrpo_actors.algo.advantages import one_group_advantages
from mgrpo_actors.algo.config import AdvantageConfig, AlignmentConfig
from protocols import AlignedBatch

__all__ = ["BatchCheck", "check_batch"]

# float32 rewards and advantages against a float64 recomputation
_ATOL, _RTOL = 1e-3, 1e-3
# Below this reward std a group's z-scores are too sensitive to float32 rounding to compare: only bounded.
_LOOSE_STD = 1e-4


class BatchCheck(ValueError):
    """A batch no aligner of this run could have built (the message says why)."""


def check_batch(
    batch: AlignedBatch,
    run_id: str,
    side: str,
    samples_per_d: int,
    alignment: AlignmentConfig,
    advantages: AdvantageConfig,
    *,
    queries: int,
    newest_version: int,
) -> None:
    """BatchCheck naming the first thing wrong with `batch` for this learner (`side` of run `run_id`); the batch's
    size must be `samples_per_d` (B·K) for main, `samples_per_d`·D for sub; `queries` is B and `newest_version` the
    newest weights version the side announced."""
    if batch.run_id != run_id or batch.side != side:
        raise BatchCheck(f"batch of run {batch.run_id!r}, side {batch.side!r}: this learner is {side} of {run_id!r}")
    _check_shapes(batch)
    _check_size(batch, side, samples_per_d, alignment)
    _check_values(batch)
    _check_origins(batch, queries, newest_version)
    _check_advantages(batch, advantages)


def _check_shapes(batch: AlignedBatch) -> None:
    n = len(batch.sample_ids)
    per_sample = ("lengths", "advantages", "weights", "policy_versions", "rewards", "kinds", "groups")
    wrong = [name for name in (*per_sample, "temperatures", "top_ps", "top_ks") if len(getattr(batch, name)) != n]
    if wrong:
        raise BatchCheck(f"{n} sample ids but {wrong[0]} holds {len(getattr(batch, wrong[0]))} values")
    tokens = int(batch.lengths.astype(np.int64).sum())
    token_arrays = ("token_ids", "loss_mask", "logprobs")
    if (batch.lengths < 1).any() or any(len(getattr(batch, name)) != tokens for name in token_arrays):
        raise BatchCheck(f"token arrays do not hold the {tokens} tokens the samples' lengths add up to")
    if len(set(batch.sample_ids)) != n:
        raise BatchCheck("sample ids repeat")


def _check_size(batch: AlignedBatch, side: str, samples_per_d: int, alignment: AlignmentConfig) -> None:
    n = len(batch.sample_ids)
    if side == "main":
        if n != samples_per_d:
            raise BatchCheck(f"{n} samples where the step requires B·K = {samples_per_d}")
        return
    d = batch.d
    allowed = (alignment.d_min <= d <= alignment.d_max) if alignment.d == "auto" else d == alignment.d
    if not allowed:
        raise BatchCheck(f"D = {d} is not this run's (algo.alignment.d: {alignment.d})")
    if n != samples_per_d * d:
        raise BatchCheck(f"{n} samples where the step requires B·K·D = {samples_per_d * d}")


def _check_values(batch: AlignedBatch) -> None:
    for name in ("advantages", "weights", "rewards", "logprobs"):
        if not np.isfinite(getattr(batch, name)).all():
            raise BatchCheck(f"{name} hold NaN or inf")
    trained = batch.weights > 0
    if not np.isin(batch.weights, (0.0, 1.0)).all():
        raise BatchCheck("weights other than 0 and 1")
    if (batch.advantages[~trained] != 0).any():
        raise BatchCheck("a placeholder (weight 0) with an advantage")
    if (batch.groups[trained] < 0).any() or (batch.policy_versions[trained] < 0).any():
        raise BatchCheck("a trained sample without an advantage group or a policy version")


def _check_origins(batch: AlignedBatch, queries: int, newest_version: int) -> None:
    trained = batch.weights > 0
    groups, versions = batch.groups[trained], batch.policy_versions[trained]
    if (groups >= queries).any():
        raise BatchCheck(f"advantage group {int(groups.max())} where the step has B = {queries} queries")
    if (versions > newest_version).any():
        raise BatchCheck(f"a sample of policy version {int(versions.max())}: the newest announced is {newest_version}")


def _check_advantages(batch: AlignedBatch, cfg: AdvantageConfig) -> None:
    """Each group's advantages against the normalisation of its own rewards (docs/method.md §Group-relative
    advantages)."""
    trained = batch.weights > 0
    for group in np.unique(batch.groups[trained]):
        members = np.flatnonzero(trained & (batch.groups == group))
        rewards = batch.rewards[members].astype(np.float64)
        given = batch.advantages[members].astype(np.float64)
        # |z| <= sqrt(n − 1) for any values normalised by their population std (and less for the unbiased one)
        bound = np.sqrt(max(len(members) - 1, 0)) * (1 + _RTOL) + _ATOL
        if np.abs(given).max() > bound:
            raise BatchCheck(f"group {int(group)}: advantage {given[np.abs(given).argmax()]:g} beyond ±{bound:.3g}")
        if rewards.std() == 0 and (given != 0).any():  # equal rewards carry no signal: every advantage is 0
            raise BatchCheck(f"group {int(group)}: advantages where every reward is the same")
        if rewards.std() < _LOOSE_STD:
            continue
        expected = one_group_advantages(rewards, cfg)
        if not np.allclose(given, expected, atol=_ATOL, rtol=_RTOL):
            raise BatchCheck(f"group {int(group)}: advantages do not follow from the group's rewards")
