"""The queue of the unsynchronised ablation (`algo.alignment.mode: none`; docs/method.md §Training schedule, the
unaligned condition, as the reference code runs it): counted sub trajectories wait here across steps, oldest
first, each as the row it will train as (its R_S computed when its step's stats were in, its advantage not yet).

A step's sub batch takes the first B·K·D rows: older leftovers first, then the step's own in arrival order. What
is left waits for the next step, so a carried sample is off-policy by up to a step (it keeps its own policy
version and behaviour logprobs, and the learner's ratio corrects for its age). **[ours]** At most `bound` rows
wait (the sub aligner uses one step's worth, B·K·D); beyond that the oldest are dropped and counted, so the
queue cannot grow without limit when S is called more often than the batch has slots.

Advantages are normalised over consecutive fixed-size chunks of the batch in queue order, regardless of query.
**[ours]** The chunk is K·D, the size of one aligned query group (docs/method.md §Group-relative advantages), so
the ablation differs from aligned training in which samples share a group, not in how large a group is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mgrpo_actors.algo.advantages import group_advantages
from mgrpo_actors.algo.config import AdvantageConfig
from mgrpo_actors.alignment.batch_rows import BatchRow

__all__ = ["FifoQueue", "Taken", "chunk_advantages", "take"]


@dataclass(frozen=True)
class FifoQueue:
    """Rows waiting for a sub batch, oldest first, and the step whose batch left them (None: the empty start)."""

    rows: tuple[BatchRow, ...] = ()
    step: int | None = None


class Taken(NamedTuple):
    """What one step takes from the queue."""

    rows: list[BatchRow]  # the batch's samples, in queue order (at most `slots`)
    carried: int  # how many of them an earlier step left
    left: FifoQueue  # what waits for the next step
    dropped: int  # leftovers beyond the bound, the oldest, dropped


def take(queue: FifoQueue, fresh: Sequence[BatchRow], slots: int, bound: int, step: int) -> Taken:
    """Step `step`'s batch from `queue` and the step's own `fresh` rows (arrival order): the first `slots`,
    the rest left queued, at most `bound` of them (the newest kept)."""
    if slots < 1 or bound < 0:
        raise ValueError(f"fifo queue: slots must be >= 1 and bound >= 0, got slots={slots}, bound={bound}")
    waiting = [*queue.rows, *fresh]
    rows, rest = waiting[:slots], waiting[slots:]
    dropped = max(0, len(rest) - bound)
    return Taken(rows, min(len(queue.rows), slots), FifoQueue(tuple(rest[dropped:]), step), dropped)


def chunk_advantages(rewards: Sequence[float], slots: int, chunk: int, cfg: AdvantageConfig) -> np.ndarray:
    """A_S of a batch's first len(rewards) samples (queue order; the rest of its `slots` are placeholders):
    each consecutive `chunk` of slots is one group, whichever queries its samples belong to. Placeholders
    are not members (docs/method.md §Group-relative advantages [ours]), so a short last chunk groups only
    what it holds and a chunk of fewer than 2 samples gets 0."""
    n = len(rewards)
    if chunk < 1 or slots % chunk or n > slots:
        raise ValueError(f"fifo chunks: {n} samples in {slots} slots cut into chunks of {chunk}")
    padded = np.zeros(slots)
    padded[:n] = rewards
    counted = np.arange(slots) < n
    groups = group_advantages(padded.reshape(-1, chunk), counted.reshape(-1, chunk), cfg)
    return groups.reshape(-1)[:n]
