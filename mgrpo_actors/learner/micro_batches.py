"""An aligned batch as the tensors a learner's forward passes take (docs/method.md §Objective).

Token t of a trajectory is predicted at position t − 1, so targets, behaviour logprobs and the loss
mask are the trajectory's own from position 1 on. Samples with weight 0 (alignment placeholders,
failed rollouts) have an all-zero loss mask and add nothing to the loss or to its global denominator,
so they are skipped. Samples are grouped by the sampling settings that generated them (the ratio uses
logprobs under the same distribution), ordered longest first and cut into micro-batches of at most `size`
samples, padded on the right.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from mgrpo_actors.engines.base import SamplingParams
from protocols import AlignedBatch

__all__ = ["MicroBatch", "micro_batches", "target_mask_sums", "trainable_rows"]


@dataclass(frozen=True)
class MicroBatch:
    """Right-padded rows of one sampling setting; token tensors are (n, T), per-target ones (n, T − 1)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor  # input_ids[:, 1:]
    old_logprobs: torch.Tensor  # behaviour logprob of each target
    loss_mask: torch.Tensor  # 1 on the targets the agent sampled
    advantages: torch.Tensor  # (n,)
    sampling: SamplingParams
    sample_ids: tuple[str, ...]


def trainable_rows(batch: AlignedBatch, skip_zero_advantage: bool = False) -> list[int]:
    """Samples with weight > 0 and a target; with `skip_zero_advantage`, also those with A != 0 only
    (a sample with A = 0 has zero loss and zero gradient when no KL term is used)."""
    return [
        i
        for i in range(len(batch.sample_ids))
        if batch.weights[i] > 0 and batch.lengths[i] > 1 and not (skip_zero_advantage and batch.advantages[i] == 0)
    ]


def micro_batches(batch: AlignedBatch, size: int, pad_id: int, rows: list[int] | None = None) -> list[MicroBatch]:
    """The batch's samples `rows` (default: the trainable ones) as micro-batches of at most `size` rows."""
    offsets = np.concatenate([[0], np.cumsum(batch.lengths, dtype=np.int64)])
    groups: dict[tuple[float, float, int], list[int]] = defaultdict(list)
    for i in trainable_rows(batch) if rows is None else rows:
        groups[(float(batch.temperatures[i]), float(batch.top_ps[i]), int(batch.top_ks[i]))].append(i)
    result = []
    for (temperature, top_p, top_k), rows in groups.items():
        sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=1)
        # Longest first, so the rows of a micro-batch are of like length: each is padded to its longest, and a
        # sub-agent's episodes range from a few hundred to thousands of tokens (the sum over micro-batches, the
        # batch's gradient, does not depend on the grouping; the largest micro-batch comes first).
        rows = sorted(rows, key=lambda i: (-int(batch.lengths[i]), i))
        for start in range(0, len(rows), size):
            result.append(_micro_batch(batch, rows[start : start + size], offsets, pad_id, sampling))
    return result


def _micro_batch(
    batch: AlignedBatch, rows: list[int], offsets: np.ndarray, pad_id: int, sampling: SamplingParams
) -> MicroBatch:
    width = int(max(batch.lengths[i] for i in rows))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    attention = np.zeros((len(rows), width), dtype=np.int64)
    logprobs = np.zeros((len(rows), width), dtype=np.float32)
    mask = np.zeros((len(rows), width), dtype=np.float32)
    for r, i in enumerate(rows):
        span = slice(int(offsets[i]), int(offsets[i + 1]))
        n = int(batch.lengths[i])
        ids[r, :n] = batch.token_ids[span]
        attention[r, :n] = 1
        logprobs[r, :n] = batch.logprobs[span]
        mask[r, :n] = batch.loss_mask[span]
    input_ids = torch.from_numpy(ids)
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=torch.from_numpy(attention),
        targets=input_ids[:, 1:],
        old_logprobs=torch.from_numpy(logprobs[:, 1:]),
        loss_mask=torch.from_numpy(mask[:, 1:]),
        advantages=torch.from_numpy(batch.advantages[rows].astype(np.float32)),
        sampling=sampling,
        sample_ids=tuple(batch.sample_ids[i] for i in rows),
    )


def target_mask_sums(batch: AlignedBatch) -> torch.Tensor:
    """Loss tokens per trainable sample, counted on the targets (positions 1 on), shaped (N, 1): what
    objective.loss_denominator needs of the whole batch without padding it."""
    offsets = np.concatenate([[0], np.cumsum(batch.lengths, dtype=np.int64)])
    sums = [float(batch.loss_mask[int(offsets[i]) + 1 : int(offsets[i + 1])].sum()) for i in trainable_rows(batch)]
    return torch.tensor(sums, dtype=torch.float64).reshape(-1, 1)
