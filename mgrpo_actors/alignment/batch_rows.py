"""Rows of an aligned batch and the AlignedBatch message they make (what a learner reads).

A row is one sample: a trajectory's tokens with its advantage, loss weight and reward, or a
placeholder (alignment's fill for d_k = 0, or a failed rollout's slot) of one masked token: weight 0
and an all-zero loss mask, so shapes stay fixed and nothing is learned from it (docs/method.md §Trajectory
alignment). Every row records the sampling that produced it and its policy version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from protocols import SAMPLE_KINDS, AlignedBatch, Trajectory

__all__ = [
    "BatchRow",
    "RolloutKey",
    "batch_id",
    "batch_to_rows",
    "join_chunks",
    "placeholder_row",
    "rows_to_batch",
    "split_batch",
    "trajectory_row",
]

RolloutKey = tuple[str, int]  # (query id, rollout index)

# Bytes a chunk keeps free for the envelope, ids and scalars besides its arrays.
_CHUNK_OVERHEAD = 64 * 1024
# Encoded bytes per token (int32 id, uint8 mask, float32 logprob) and per sample (10 per-sample arrays).
_BYTES_PER_TOKEN = 9
_BYTES_PER_SAMPLE = 10 * 4 + 8
# The per-sample arrays of an AlignedBatch, cut and joined with its samples.
_PER_SAMPLE = (
    "lengths",
    "advantages",
    "weights",
    "policy_versions",
    "rewards",
    "kinds",
    "groups",
    "temperatures",
    "top_ps",
    "top_ks",
)


def batch_id(run_id: str, side: str, step: int) -> str:
    """The id of a step's batch on one side; its chunks are de-duplicated in JetStream as "<id>#<chunk>"."""
    return f"{run_id}-{side}-step{step}"


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
    group: int = -1  # its advantage group (the samples normalised with it share it); -1: none (a placeholder)


def trajectory_row(
    trajectory: Trajectory, sample_id: str, kind: str, advantage: float, reward: float, group: int
) -> BatchRow:
    """A sample that trains on `trajectory` (weight 1), of advantage group `group`."""
    return BatchRow(
        sample_id=sample_id,
        kind=kind,
        token_ids=trajectory.token_ids,
        loss_mask=trajectory.loss_mask,
        logprobs=trajectory.logprobs,
        advantage=advantage,
        weight=1.0,
        reward=reward,
        policy_version=trajectory.policy_version,
        temperature=trajectory.temperature,
        top_p=trajectory.top_p,
        top_k=trajectory.top_k,
        group=group,
    )


def placeholder_row(sample_id: str, kind: str) -> BatchRow:
    """A masked one-token sample: weight 0, loss mask 0, advantage 0, reward 0."""
    return BatchRow(
        sample_id=sample_id,
        kind=kind,
        token_ids=np.zeros(1, np.int32),
        loss_mask=np.zeros(1, np.uint8),
        logprobs=np.zeros(1, np.float32),
        advantage=0.0,
        weight=0.0,
        reward=0.0,
        policy_version=-1,
    )


def rows_to_batch(
    run_id: str, side: str, step: int, batch_id: str, rows: Sequence[BatchRow], d: int = 0
) -> AlignedBatch:
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
        groups=np.array([row.group for row in rows], np.int32),
        temperatures=np.array([row.temperature for row in rows], np.float32),
        top_ps=np.array([row.top_p for row in rows], np.float32),
        top_ks=np.array([row.top_k for row in rows], np.int32),
        d=d,
    )


def batch_to_rows(batch: AlignedBatch) -> list[BatchRow]:
    """The rows of a whole batch (join its chunks first), as `rows_to_batch` took them (values as the batch
    stores them: float32 scalars): how a batch kept in KV becomes rows again (alignment/fifo_store.py)."""
    ends = np.cumsum(batch.lengths, dtype=np.int64).tolist()
    rows = []
    for i, end in enumerate(ends):
        tokens = slice(end - int(batch.lengths[i]), end)
        rows.append(
            BatchRow(
                sample_id=batch.sample_ids[i],
                kind=SAMPLE_KINDS[int(batch.kinds[i])],
                token_ids=batch.token_ids[tokens],
                loss_mask=batch.loss_mask[tokens],
                logprobs=batch.logprobs[tokens],
                advantage=float(batch.advantages[i]),
                weight=float(batch.weights[i]),
                reward=float(batch.rewards[i]),
                policy_version=int(batch.policy_versions[i]),
                temperature=float(batch.temperatures[i]),
                top_p=float(batch.top_ps[i]),
                top_k=int(batch.top_ks[i]),
                group=int(batch.groups[i]),
            )
        )
    return rows


def _sample_bytes(batch: AlignedBatch) -> np.ndarray:
    return (
        batch.lengths.astype(np.int64) * _BYTES_PER_TOKEN
        + _BYTES_PER_SAMPLE
        + np.array([len(s.encode()) + 8 for s in batch.sample_ids])
    )


def split_batch(batch: AlignedBatch, max_bytes: int) -> list[AlignedBatch]:
    """`batch` as chunks of whole samples, each under `max_bytes` encoded (a step's batch can outgrow one
    NATS message: B·K·D samples of thousands of tokens). Chunk i of n has chunk=i, num_chunks=n; one
    chunk when it fits. A learner takes a batch once it has all its chunks."""
    budget = max_bytes - _CHUNK_OVERHEAD
    sizes = _sample_bytes(batch)
    if len(sizes) and sizes.max() > budget:
        worst = int(sizes.argmax())
        raise ValueError(
            f"sample {batch.sample_ids[worst]} alone needs ~{int(sizes[worst])} bytes; "
            f"nats.max_message_bytes ({max_bytes}) is too small"
        )
    bounds, start, used = [], 0, 0
    for i, size in enumerate(sizes.tolist()):
        if used + size > budget and i > start:
            bounds.append((start, i))
            start, used = i, 0
        used += size
    bounds.append((start, len(sizes)))
    if len(bounds) == 1:
        return [batch]
    offsets = np.concatenate([[0], np.cumsum(batch.lengths, dtype=np.int64)])
    return [_slice(batch, a, b, offsets, chunk, len(bounds)) for chunk, (a, b) in enumerate(bounds)]


def _slice(batch: AlignedBatch, a: int, b: int, offsets: np.ndarray, chunk: int, num_chunks: int) -> AlignedBatch:
    tokens = slice(int(offsets[a]), int(offsets[b]))
    per_token = {name: getattr(batch, name)[tokens] for name in ("token_ids", "loss_mask", "logprobs")}
    per_sample = {name: getattr(batch, name)[a:b] for name in _PER_SAMPLE}
    return dataclasses.replace(
        batch, sample_ids=batch.sample_ids[a:b], chunk=chunk, num_chunks=num_chunks, **per_token, **per_sample
    )


def join_chunks(chunks: Sequence[AlignedBatch]) -> AlignedBatch:
    """The batch `split_batch` cut into `chunks` (any order), whole again."""
    ordered = sorted(chunks, key=lambda c: c.chunk)
    if [c.chunk for c in ordered] != list(range(ordered[0].num_chunks)):
        raise ValueError(f"batch {ordered[0].batch_id}: chunks {[c.chunk for c in ordered]} of {ordered[0].num_chunks}")
    if len(ordered) == 1:
        return ordered[0]
    arrays = ("token_ids", "loss_mask", "logprobs", *_PER_SAMPLE)
    joined = {name: np.concatenate([getattr(c, name) for c in ordered]) for name in arrays}
    return dataclasses.replace(
        ordered[0], sample_ids=[s for c in ordered for s in c.sample_ids], chunk=0, num_chunks=1, **joined
    )
