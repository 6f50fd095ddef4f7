"""What a learner does to a batch before training on it: drop samples that are too stale and, for the control
run of the learning test, flip the advantages' sign.

Staleness is the learner's version minus the version that generated a sample. Dropping keeps the batch's shape:
a stale sample gets weight 0 (like an alignment placeholder), so it leaves both the loss and its global
denominator (docs/method.md §Objective), and is counted, never silently lost. Its advantage group was normalised
with it, so the group's survivors are normalised again over the survivors alone, from the rewards the batch
carries (docs/method.md §Objective, asynchronous mode): no sample keeps an advantage computed with a member it lost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from mgrpo_actors.algo.advantages import one_group_advantages
from mgrpo_actors.algo.config import AdvantageConfig
from protocols import AlignedBatch

__all__ = ["Staleness", "drop_stale", "signed_advantages"]


@dataclass(frozen=True)
class Staleness:
    """What the staleness filter saw of a batch (real samples only; placeholders have no version)."""

    mean: float  # mean learner version − sample version
    max: int
    dropped: int  # samples beyond the bound, weighted 0
    regrouped: int  # advantage groups normalised again over their survivors (groups left with none not counted)

    def as_dict(self) -> dict[str, float]:
        return {
            "staleness_mean": self.mean,
            "staleness_max": float(self.max),
            "stale_dropped": float(self.dropped),
            "stale_groups_renormalised": float(self.regrouped),
        }


def drop_stale(
    batch: AlignedBatch, learner_version: int, max_staleness: int, advantages: AdvantageConfig
) -> tuple[AlignedBatch, Staleness]:
    """The batch with every sample generated more than `max_staleness` policy versions before `learner_version`
    weighted 0 (advantage 0), the other members of its advantage group given advantages normalised over the
    survivors (`advantages`: the aligners' group normalisation), and what was seen."""
    real = batch.weights > 0
    age = learner_version - batch.policy_versions.astype(np.int64)
    stale = (age > max_staleness) & real
    seen_mean = float(age[real].mean()) if real.any() else 0.0
    seen_max = int(age[real].max()) if real.any() else 0
    if not stale.any():
        return batch, Staleness(seen_mean, seen_max, 0, 0)
    weights = np.where(stale, np.float32(0.0), batch.weights).astype(np.float32)
    values = np.where(stale, 0.0, batch.advantages.astype(np.float64))
    regrouped = 0
    for group in sorted({int(g) for g in batch.groups[stale] if g >= 0}):
        survivors = np.flatnonzero((batch.groups == group) & real & ~stale)
        if len(survivors):  # a group left with no member has nothing to normalise
            values[survivors] = one_group_advantages(batch.rewards[survivors], advantages)
            regrouped += 1
    filtered = dataclasses.replace(batch, weights=weights, advantages=values.astype(np.float32))
    return filtered, Staleness(seen_mean, seen_max, int(stale.sum()), regrouped)


def signed_advantages(batch: AlignedBatch, sign: int) -> AlignedBatch:
    """The batch with its advantages multiplied by `sign` (1: as aligned; -1: the sign-flipped control)."""
    if sign == 1:
        return batch
    return dataclasses.replace(batch, advantages=(batch.advantages * np.float32(sign)).astype(np.float32))
