"""The alignment ablation (`algo.alignment.mode: none`): the sub batch as the reference code builds it,
without trajectory alignment (docs/method.md §Trajectory alignment; the reference implementation "does no
alignment"). The step's sub trajectories fill the B·K·D slots first-in-first-out, in the order they
arrived, whichever rollout they belong to: a rollout that called S often takes many slots, one that
called it once takes one, and what arrives after the slots are full is dropped; a shortfall is filled
with placeholders (weight 0). R_S is the same as aligned (alignment/sub.py query_sub_rewards), and the
advantage group of a query is its samples in the batch (docs/method.md §Group-relative advantages)."""

from __future__ import annotations

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
from mgrpo_actors.alignment.sub import failed_and_lost, query_sub_rewards, sub_call_lists
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.phases import ALIGN, timed
from mgrpo_actors.rollout.config import RolloutConfig
from protocols import AlignedBatch, RewardStats, StepPlan, Trajectory

__all__ = ["build_unaligned_sub_batch", "fifo_calls"]


def fifo_calls(
    plan: StepPlan, stats: Mapping[RolloutKey, RewardStats], trajectories: Mapping[str, Trajectory]
) -> list[tuple[int, int, str]]:
    """(query index, rollout, call id) of every counted sub trajectory in arrival order (`trajectories`'
    order). Counted: named by a rollout that did not fail (alignment/sub.py sub_call_lists)."""
    owner = {
        call: (b, k)
        for b, rollouts in enumerate(sub_call_lists(plan, stats, trajectories))
        for k, calls in enumerate(rollouts)
        for call in calls
    }
    return [(*owner[call], call) for call in trajectories if call in owner]


@timed(ALIGN)
def build_unaligned_sub_batch(
    plan: StepPlan,
    stats: Mapping[RolloutKey, RewardStats],
    trajectories: Mapping[str, Trajectory],
    d: int,
    algo: AlgoConfig,
    rollout_cfg: RolloutConfig,
    questions: Mapping[str, Question],
) -> tuple[AlignedBatch, dict[str, float]]:
    """The sub batch of `plan`, B·K·D samples filled first-in-first-out, and its metrics."""
    slots = len(plan.query_ids) * plan.num_rollouts * d
    counted = fifo_calls(plan, stats, trajectories)
    taken, dropped = counted[:slots], max(0, len(counted) - slots)
    # R_S of every counted call (the metric covers them all, as aligned mode's does), the batch's first.
    rewards = np.zeros(len(counted))
    for b, query in enumerate(plan.query_ids):
        mine = [i for i, (qb, _, _) in enumerate(counted) if qb == b]
        if mine:
            question = questions.get(query) or Question(id=query, question="", answer="")
            calls = [trajectories[counted[i][2]] for i in mine]
            rewards[mine] = query_sub_rewards(
                question, calls, [stats[(query, counted[i][1])] for i in mine], rollout_cfg
            )
    # One group per query over its samples in the batch: a (B, slots) array with a counted mask.
    grouped, member = np.zeros((len(plan.query_ids), slots)), np.zeros((len(plan.query_ids), slots), dtype=bool)
    for i, (b, _, _) in enumerate(taken):
        grouped[b, i], member[b, i] = rewards[i], True
    advantages = group_advantages(grouped, member, algo.advantages).sum(axis=0)  # each column holds one sample
    rows: list[BatchRow] = []
    for i, (b, k, call) in enumerate(taken):
        s = stats[(plan.query_ids[b], k)]
        rows.append(
            trajectory_row(
                trajectories[call],
                f"{plan.query_ids[b]}/{s.attempt}/r{k}/{call}#0",
                "original",
                float(advantages[i]),
                float(rewards[i]),
            )
        )
    rows += [placeholder_row(f"-/-/fifo/-#{i}", "placeholder") for i in range(len(taken), slots)]
    batch = rows_to_batch(plan.run_id, "sub", plan.step, batch_id(plan.run_id, "sub", plan.step), rows, d=d)
    # d_k, as aligned mode counts it
    observed = np.array([len(calls) for rollouts in sub_call_lists(plan, stats, trajectories) for calls in rollouts])
    figures = {
        "reward_mean": float(rewards.mean()) if len(counted) else 0.0,
        "calls": float(len(counted)),
        "d": float(d),
        "dk_mean": float(observed.mean()),
        "dk_max": float(observed.max()),
        "samples": float(slots),
        "original": float(len(taken)),
        "duplicates": 0.0,
        "placeholders": float(slots - len(taken)),
        "dropped": float(dropped),
        **failed_and_lost(plan, stats, trajectories),
        "advantage_abs_mean": float(np.abs(advantages[: len(taken)]).mean()) if taken else 0.0,
    }
    return batch, figures
