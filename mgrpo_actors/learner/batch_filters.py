"""What a learner does to a batch before training on it: drop samples that are too stale (async mode)
and, for the control run of the learning test, flip the advantages' sign.

Dropping keeps the batch's shape: a stale sample gets weight 0 (like an alignment placeholder), so it
leaves both the loss and its global denominator (docs/method.md §Objective) and is counted, never silently lost.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from protocols import AlignedBatch

__all__ = ["drop_stale", "signed_advantages"]


def drop_stale(batch: AlignedBatch, learner_version: int, max_staleness: int | None) -> tuple[AlignedBatch, int]:
    """The batch with every sample generated more than `max_staleness` policy versions before
    `learner_version` weighted 0, and how many were (real samples only; placeholders are already 0).
    `max_staleness` None keeps everything (sync mode)."""
    if max_staleness is None:
        return batch, 0
    stale = (learner_version - batch.policy_versions.astype(np.int64) > max_staleness) & (batch.weights > 0)
    count = int(stale.sum())
    if count == 0:
        return batch, 0
    weights = np.where(stale, np.float32(0.0), batch.weights).astype(np.float32)
    return dataclasses.replace(batch, weights=weights), count


def signed_advantages(batch: AlignedBatch, sign: int) -> AlignedBatch:
    """The batch with its advantages multiplied by `sign` (1: as aligned; -1: the sign-flipped control)."""
    if sign == 1:
        return batch
    return dataclasses.replace(batch, advantages=(batch.advantages * np.float32(sign)).astype(np.float32))
