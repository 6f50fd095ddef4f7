"""The main aligner's math for one step: the B·K main trajectories of the step's plan become one batch
of exactly B·K samples with group advantages (docs/method.md §Rewards, §Group-relative advantages).

R_M = α1·r_format + α2·r_correct if M's format is valid, else 0, from the scores the main agent
judged; A_M = (R_M − mean_k) / std_k per query. A failed or missing rollout keeps its slot as a
masked placeholder: reward 0 in the metrics, weight 0, and left out of its group's statistics (the
policy did not produce it, so it must not move the others' advantages).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mgrpo_actors.algo.advantages import group_advantages
from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.algo.rewards import main_reward
from mgrpo_actors.alignment.batch_rows import (
    BatchRow,
    RolloutKey,
    batch_id,
    placeholder_row,
    rows_to_batch,
    trajectory_row,
)
from mgrpo_actors.phases import ALIGN, timed
from protocols import AlignedBatch, StepPlan, Trajectory

__all__ = ["batch_id", "build_main_batch", "main_complete"]


def main_complete(plan: StepPlan, trajectories: Mapping[RolloutKey, Trajectory]) -> bool:
    """Whether the step has M's K trajectories of every query of `plan` (a failed rollout's counts: it arrived)."""
    return all((q, k) in trajectories for q in plan.query_ids for k in range(plan.num_rollouts))


@timed(ALIGN)
def build_main_batch(
    plan: StepPlan, trajectories: Mapping[RolloutKey, Trajectory], cfg: AlgoConfig
) -> tuple[AlignedBatch, dict[str, float]]:
    """The main batch of `plan` from the trajectories received (missing ones count as failed), and its metrics."""
    k = plan.num_rollouts
    present = [[trajectories.get((q, i)) for i in range(k)] for q in plan.query_ids]
    counted = np.array([[t is not None and not t.failed for t in row] for row in present], dtype=bool)
    format_ok = np.array([[bool(t and t.format_ok) for t in row] for row in present], dtype=bool)
    r_correct = np.array([[t.r_correct if t else 0.0 for t in row] for row in present], dtype=np.float64)
    rewards = main_reward(format_ok, r_correct, cfg.rewards)  # docs/method.md §Rewards
    rewards = np.where(counted, rewards, 0.0)
    advantages = group_advantages(rewards, counted, cfg.advantages)  # docs/method.md §Group-relative advantages
    rows: list[BatchRow] = []
    for b, query in enumerate(plan.query_ids):
        for i, traj in enumerate(present[b]):
            if counted[b, i]:
                assert traj is not None
                rows.append(
                    trajectory_row(
                        traj,
                        f"{query}/{traj.attempt}/r{i}",
                        "original",
                        float(advantages[b, i]),
                        float(rewards[b, i]),
                        group=b,  # the query's K rollouts
                    )
                )
            else:
                rows.append(placeholder_row(f"{query}/{traj.attempt if traj else '-'}/r{i}", "failed"))
    batch = rows_to_batch(plan.run_id, "main", plan.step, batch_id(plan.run_id, "main", plan.step), rows)
    return batch, _metrics(rewards, counted, format_ok, r_correct, advantages, present)


def _metrics(rewards, counted, format_ok, r_correct, advantages, present) -> dict[str, float]:  # type: ignore[no-untyped-def]
    n = max(int(counted.sum()), 1)
    return {
        "reward_mean": float(rewards[counted].sum() / n),
        "reward_std": float(rewards[counted].std()) if counted.any() else 0.0,
        "r_correct_mean": float(r_correct[counted].sum() / n),
        "format_ok_rate": float(format_ok[counted].sum() / n),
        "advantage_abs_mean": float(np.abs(advantages[counted]).sum() / n),
        "samples": float(counted.size),
        "failed": float((~counted).sum()),
        "missing": float(sum(t is None for row in present for t in row)),
        "tokens": float(sum(int(t.loss_mask.sum()) for row in present for t in row if t is not None)),
    }
