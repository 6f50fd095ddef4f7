"""The alignment ablations: sub batches without trajectory alignment (docs/method.md §Trajectory alignment,
§Training schedule; the reference implementation "does no alignment"). Both fill the B·K·D slots
first-in-first-out, whichever rollout a sub trajectory belongs to: a rollout that called S often takes many
slots, one that called it once takes one; a shortfall is filled with placeholders (weight 0). R_S is the same
as aligned (alignment/sub.py query_sub_rewards).

- `algo.alignment.mode: none`, the paper's unsynchronised condition (build_fifo_sub_batch): the slots are taken
  from a queue kept across steps (alignment/fifo_queue.py), leftovers carried into the next step, and the
  advantages are normalised over consecutive chunks of K·D samples regardless of query.
- `algo.alignment.mode: none-per-step` **[ours]** (build_unaligned_sub_batch): only the step's own sub
  trajectories fill the slots, what arrives after they are full is dropped, and the advantage group of a
  query is its samples in the batch (docs/method.md §Group-relative advantages).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from mgrpo_actors.algo.advantages import group_advantages
from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.alignment.batch_rows import (
    BatchRow,
    RolloutKey,
    batch_id,
    placeholder_row,
    rows_to_batch,
    trajectory_row,
)
from mgrpo_actors.alignment.fifo_queue import FifoQueue, chunk_advantages, take
from mgrpo_actors.alignment.sub import failed_and_lost, query_sub_rewards, sub_call_lists
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.phases import ALIGN, timed
from mgrpo_actors.rollout.config import RolloutConfig
from protocols import DEFAULT_SUB_TYPE, AlignedBatch, RewardStats, StepPlan, Trajectory

__all__ = ["build_fifo_sub_batch", "build_unaligned_sub_batch", "counted_rewards", "fifo_calls"]

Counted = tuple[int, int, str]  # (query index, rollout, call id) of a counted sub trajectory


def fifo_calls(
    plan: StepPlan, stats: Mapping[RolloutKey, RewardStats], trajectories: Mapping[str, Trajectory]
) -> list[Counted]:
    """(query index, rollout, call id) of every counted sub trajectory in arrival order (`trajectories`'
    order). Counted: named by a rollout that did not fail (alignment/sub.py sub_call_lists)."""
    owner = {
        call: (b, k)
        for b, rollouts in enumerate(sub_call_lists(plan, stats, trajectories))
        for k, calls in enumerate(rollouts)
        for call in calls
    }
    return [(*owner[call], call) for call in trajectories if call in owner]


def counted_rewards(
    plan: StepPlan,
    stats: Mapping[RolloutKey, RewardStats],
    trajectories: Mapping[str, Trajectory],
    counted: list[Counted],
    rollout_cfg: RolloutConfig,
    questions: Mapping[str, Question],
) -> np.ndarray:
    """R_S of every counted call, computed per query as aligned mode does (docs/method.md §Rewards)."""
    rewards = np.zeros(len(counted))
    for b, query in enumerate(plan.query_ids):
        mine = [i for i, (qb, _, _) in enumerate(counted) if qb == b]
        if mine:
            question = questions.get(query) or Question(id=query, question="", answer="")
            calls = [trajectories[counted[i][2]] for i in mine]
            rewards[mine] = query_sub_rewards(
                question, calls, [stats[(query, counted[i][1])] for i in mine], rollout_cfg
            )
    return rewards


def _row(
    plan: StepPlan,
    stats: Mapping[RolloutKey, RewardStats],
    trajectories: Mapping[str, Trajectory],
    entry: Counted,
    advantage: float,
    reward: float,
    group: int,
) -> BatchRow:
    # The id names the query's attempt (unique per attempt) and the call: unique across steps, so a carried
    # sample keeps it in a later step's batch.
    b, k, call = entry
    sample_id = f"{plan.query_ids[b]}/{stats[(plan.query_ids[b], k)].attempt}/r{k}/{call}#0"
    return trajectory_row(trajectories[call], sample_id, "original", advantage, reward, group=group)


def _step_figures(
    plan: StepPlan,
    stats: Mapping[RolloutKey, RewardStats],
    trajectories: Mapping[str, Trajectory],
    d: int,
    rewards: np.ndarray,
    advantages: np.ndarray,
    slots: int,
) -> dict[str, float]:
    """What both ablations report: the step's own calls (R_S, d_k as aligned mode counts them) and the batch."""
    observed = np.array([len(calls) for rollouts in sub_call_lists(plan, stats, trajectories) for calls in rollouts])
    return {
        "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
        "calls": float(len(rewards)),
        "d": float(d),
        "dk_mean": float(observed.mean()),
        "dk_max": float(observed.max()),
        "samples": float(slots),
        "original": float(len(advantages)),
        "duplicates": 0.0,
        "placeholders": float(slots - len(advantages)),
        **failed_and_lost(plan, stats, trajectories),
        "advantage_abs_mean": float(np.abs(advantages).mean()) if len(advantages) else 0.0,
    }


def _batch(plan: StepPlan, rows: list[BatchRow], slots: int, d: int, side: str) -> AlignedBatch:
    rows = rows + [placeholder_row(f"-/-/fifo/-#{i}", "placeholder") for i in range(len(rows), slots)]
    return rows_to_batch(plan.run_id, side, plan.step, batch_id(plan.run_id, side, plan.step), rows, d=d)


@timed(ALIGN)
def build_unaligned_sub_batch(
    plan: StepPlan,
    stats: Mapping[RolloutKey, RewardStats],
    trajectories: Mapping[str, Trajectory],
    d: int,
    algo: AlgoConfig,
    rollout_cfg: RolloutConfig,
    questions: Mapping[str, Question],
    side: str = DEFAULT_SUB_TYPE,
) -> tuple[AlignedBatch, dict[str, float]]:
    """`none-per-step`: the sub batch of `plan`, B·K·D samples filled first-in-first-out from the step's own
    sub trajectories, and its metrics."""
    slots = len(plan.query_ids) * plan.num_rollouts * d
    counted = fifo_calls(plan, stats, trajectories)
    taken = counted[:slots]
    # R_S of every counted call (the metric covers them all, as aligned mode's does), the batch's first.
    rewards = counted_rewards(plan, stats, trajectories, counted, rollout_cfg, questions)
    # One group per query over its samples in the batch: a (B, slots) array with a counted mask.
    grouped, member = np.zeros((len(plan.query_ids), slots)), np.zeros((len(plan.query_ids), slots), dtype=bool)
    for i, (b, _, _) in enumerate(taken):
        grouped[b, i], member[b, i] = rewards[i], True
    advantages = group_advantages(grouped, member, algo.advantages).sum(axis=0)  # each column holds one sample
    rows = [
        _row(plan, stats, trajectories, entry, float(advantages[i]), float(rewards[i]), group=entry[0])  # its query
        for i, entry in enumerate(taken)
    ]
    figures = _step_figures(plan, stats, trajectories, d, rewards, advantages[: len(taken)], slots)
    figures["dropped"] = float(len(counted) - len(taken))
    return _batch(plan, rows, slots, d, side), figures


@timed(ALIGN)
def build_fifo_sub_batch(
    plan: StepPlan,
    stats: Mapping[RolloutKey, RewardStats],
    trajectories: Mapping[str, Trajectory],
    d: int,
    algo: AlgoConfig,
    rollout_cfg: RolloutConfig,
    questions: Mapping[str, Question],
    queue: FifoQueue,
    side: str = DEFAULT_SUB_TYPE,
) -> tuple[AlignedBatch, dict[str, float], FifoQueue]:
    """`none`: the sub batch of `plan`, B·K·D samples taken first-in-first-out from `queue` (what earlier steps
    left) and then the step's own counted sub trajectories; its metrics; and the queue left for the next step."""
    slots = len(plan.query_ids) * plan.num_rollouts * d
    counted = fifo_calls(plan, stats, trajectories)
    rewards = counted_rewards(plan, stats, trajectories, counted, rollout_cfg, questions)
    # R_S as the batch stores it (float32), so a queue restored from KV gives the same advantages; no group
    # until a batch takes the row.
    fresh = [
        _row(plan, stats, trajectories, entry, 0.0, float(np.float32(r)), group=-1)
        for entry, r in zip(counted, rewards, strict=True)
    ]
    taken = take(queue, fresh, slots, bound=slots, step=plan.step)  # [ours] bound: one step's worth
    chunk = plan.num_rollouts * d  # [ours] one aligned query group's size (alignment/fifo_queue.py)
    advantages = chunk_advantages([row.reward for row in taken.rows], slots, chunk, algo.advantages)
    rows = [  # the advantage group of a sample is its chunk
        dataclasses.replace(row, advantage=float(a), group=i // chunk)
        for i, (row, a) in enumerate(zip(taken.rows, advantages, strict=True))
    ]
    figures = _step_figures(plan, stats, trajectories, d, rewards, advantages, slots)
    figures.update(carried=float(taken.carried), queued=float(len(taken.left.rows)), dropped=float(taken.dropped))
    return _batch(plan, rows, slots, d, side), figures, taken.left
