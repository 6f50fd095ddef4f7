"""Rows of an aligned batch and the AlignedBatch message they make (what a learner reads).

A row is one sample: a trajectory's tokens with its advantage, loss weight and reward, or a
placeholder (alignment's fill for d_k = 0, or a failed rollout's slot) of one masked token: weight 0
and an all-zero loss mask, so shapes stay fixed and nothing is learned from it (m-grpo.md §Trajectory
alignment). Every row records the sampling that produced it and its policy version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from protocols import SAMPLE_KINDS, AlignedBatch, Trajectory

__all__ = ["BatchRow", "placeholder_row", "rows_to_batch", "trajectory_row"]


@dataclass(frozen=True)
class BatchRow:
    """One sample of an aligned batch."""

    sample_id: str  # "<query>/<attempt>/r<k>[/<call id>#<slot>]": traces the sample to its rollout
    kind: str  # one of protocols.SAMPLE_KINDS
    token_ids: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    advantage: float
    weight: float
    reward: float
    policy_version: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


def trajectory_row(trajectory: Trajectory, sample_id: str, kind: str, advantage: float, reward: float) -> BatchRow:
    """A sample that trains on `trajectory` (weight 1)."""
    return BatchRow(
        sample_id=sample_id, kind=kind, token_ids=trajectory.token_ids, loss_mask=trajectory.loss_mask,
        logprobs=trajectory.logprobs, advantage=advantage, weight=1.0, reward=reward,
        policy_version=trajectory.policy_version, temperature=trajectory.temperature, top_p=trajectory.top_p, top_k=trajectory.top_k,
    )  # fmt: skip


def placeholder_row(sample_id: str, kind: str) -> BatchRow:
    """A masked one-token sample: weight 0, loss mask 0, advantage 0, reward 0."""
    return BatchRow(
        sample_id=sample_id, kind=kind, token_ids=np.zeros(1, np.int32), loss_mask=np.zeros(1, np.uint8),
        logprobs=np.zeros(1, np.float32), advantage=0.0, weight=0.0, reward=0.0, policy_version=-1,
    )  # fmt: skip


def rows_to_batch(run_id: str, side: str, step: int, batch_id: str, rows: Sequence[BatchRow], d: int = 0) -> AlignedBatch:
    """The AlignedBatch of `rows`, token arrays concatenated in row order."""
    return AlignedBatch(
        run_id=run_id,
        side=side,
        step=step,
        batch_id=batch_id,
        sample_ids=[row.sample_id for row in rows],
        lengths=np.array([len(row.token_ids) for row in rows], np.int32),
        token_ids=np.concatenate([row.token_ids for row in rows]).astype(np.int32),
        loss_mask=np.concatenate([row.loss_mask for row in rows]).astype(np.uint8),
        logprobs=np.concatenate([row.logprobs for row in rows]).astype(np.float32),
        advantages=np.array([row.advantage for row in rows], np.float32),
        weights=np.array([row.weight for row in rows], np.float32),
        policy_versions=np.array([row.policy_version for row in rows], np.int32),
        rewards=np.array([row.reward for row in rows], np.float32),
        kinds=np.array([SAMPLE_KINDS.index(row.kind) for row in rows], np.uint8),
        temperatures=np.array([row.temperature for row in rows], np.float32),
        top_ps=np.array([row.top_p for row in rows], np.float32),
        top_ks=np.array([row.top_k for row in rows], np.int32),
        d=d,
    )
