"""The sub aligner's math for one step: the step's RewardStats (scalars from the main side) and the
sub trajectories they name become one batch of exactly B·K·D samples (docs/method.md §Rewards,
§Trajectory alignment, §Group-relative advantages).

Per sub call: R_S = β1·r_format(S) + β2·r_correct(M) + β3·r_expert if S's own format is valid, else 0,
where r_correct(M) is M's r_correct when M's format was valid, else 0 (from the scalars), and r_expert
is the expert judge's score of S's findings against the question's evidence, judged on what S found
itself. Every rollout is aligned to D slots (seeded by run seed and step, so a re-run of the step gives
the same batch); all D·K slots of a query form one advantage group. A failed or missing rollout is
d_k = 0 (D placeholders); a named trajectory that never arrived is left out of d_k and counted as lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from mgrpo_actors.algo.advantages import sub_advantages
from mgrpo_actors.algo.alignment import AlignmentPlan, DEstimator, SlotKind, align
from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.algo.rewards import main_correct_for_sub
from mgrpo_actors.algo.scorers import subtask_text
from mgrpo_actors.alignment.batch_rows import (
    BatchRow,
    RolloutKey,
    batch_id,
    placeholder_row,
    rows_to_batch,
    trajectory_row,
)
from mgrpo_actors.envs.qa import Question
from mgrpo_actors.phases import ALIGN, timed
from mgrpo_actors.rollout.config import RolloutConfig
from mgrpo_actors.rollout.scoring import SubCallFacts, expert_for, sub_rewards
from protocols import DEFAULT_SUB_TYPE, AlignedBatch, RewardStats, StepPlan, Trajectory

__all__ = [
    "alignment_rng",
    "build_sub_batch",
    "failed_and_lost",
    "observe_step",
    "query_sub_rewards",
    "sub_call_lists",
    "sub_complete",
    "unknown_questions",
    "unused_trajectories",
]

_KIND = {SlotKind.ORIGINAL: "original", SlotKind.DUPLICATE: "duplicate", SlotKind.PLACEHOLDER: "placeholder"}


def alignment_rng(seed: int, step: int) -> np.random.Generator:
    """The alignment's random draws for one step: the same step always aligns the same way."""
    return np.random.default_rng([seed, step, 7])


def sub_complete(
    plan: StepPlan, stats: Mapping[RolloutKey, RewardStats], trajectories: Mapping[str, Trajectory]
) -> bool:
    """Whether the step has the K stats of every query of `plan` and every sub trajectory a non-failed rollout
    names (a failed rollout's trajectories are not used, so none is waited for)."""
    for q in plan.query_ids:
        for k in range(plan.num_rollouts):
            s = stats.get((q, k))
            if s is None or (not s.failed and any(c not in trajectories for c in s.sub_call_ids)):
                return False
    return True


def unknown_questions(plan: StepPlan, questions: Mapping[str, Question]) -> list[str]:
    """The plan's queries this aligner has no question for: their r_expert cannot be judged (β3 is folded)."""
    return [q for q in plan.query_ids if q not in questions]


def unused_trajectories(stats: Mapping[RolloutKey, RewardStats], trajectories: Mapping[str, Trajectory]) -> int:
    """Sub trajectories that arrived but that no non-failed rollout names (a failed or superseded attempt's)."""
    used = {c for s in stats.values() if not s.failed for c in s.sub_call_ids}
    return sum(1 for c in trajectories if c not in used)


def observe_step(estimator: DEstimator, stats: Mapping[RolloutKey, RewardStats]) -> tuple[int, dict[int, int]]:
    """After a step's batch is out, `D: auto` learns from the d_k M really produced (failed rollouts and lost
    calls say nothing about it): the D of the next step, and how many rollouts had each d_k."""
    dks = [s.num_sub_calls for s in stats.values() if not s.failed]
    estimator.observe(dks)
    return estimator.end_step(), dict(sorted(Counter(dks).items()))


def sub_call_lists(
    plan: StepPlan, stats: Mapping[RolloutKey, RewardStats], trajectories: Mapping[str, Trajectory]
) -> list[list[list[str]]]:
    """sub_ids[b][k]: the call ids of rollout k of query b that have a trajectory here (none if it failed)."""
    lists = []
    for query in plan.query_ids:
        rollouts = []
        for k in range(plan.num_rollouts):
            s = stats.get((query, k))
            rollouts.append([] if s is None or s.failed else [c for c in s.sub_call_ids if c in trajectories])
        lists.append(rollouts)
    return lists


def query_sub_rewards(
    question: Question, calls: list[Trajectory], stats: list[RewardStats], cfg: RolloutConfig
) -> np.ndarray:
    """R_S of each call of one query (stats[i]: the rollout of calls[i]), docs/method.md §Rewards, from the
    scalars that crossed and S's own trajectories (rollout/scoring.py sub_rewards)."""
    expert, weights = expert_for(question, cfg)
    main_ok = np.array([s.r_format > 0 for s in stats], dtype=bool)
    correct = main_correct_for_sub(main_ok, np.array([s.r_correct for s in stats], dtype=np.float64))
    facts = [
        SubCallFacts(
            format_ok=t.format_ok,
            main_correct=float(c),
            subtask=subtask_text(t.task, t.context),
            findings=t.findings,
            returned=t.result_ok,
        )
        for t, c in zip(calls, correct, strict=True)
    ]
    return sub_rewards(facts, expert, weights)[0]


@timed(ALIGN)
def build_sub_batch(
    plan: StepPlan,
    stats: Mapping[RolloutKey, RewardStats],
    trajectories: Mapping[str, Trajectory],
    d: int,
    rng: np.random.Generator,
    algo: AlgoConfig,
    rollout_cfg: RolloutConfig,
    questions: Mapping[str, Question],
    side: str = DEFAULT_SUB_TYPE,
) -> tuple[AlignedBatch, dict[str, float], AlignmentPlan]:
    """The sub batch of `plan` aligned to `d`, its metrics, and the alignment (for d_k statistics)."""
    sub_ids = sub_call_lists(plan, stats, trajectories)
    alignment = align(sub_ids, d, rng, algo.alignment.mode)  # docs/method.md §Trajectory alignment
    rewards: dict = {}
    for b, query in enumerate(plan.query_ids):
        keys = [(b, k, call) for k, calls in enumerate(sub_ids[b]) for call in calls]
        if keys:
            question = questions.get(query) or Question(id=query, question="", answer="")
            values = query_sub_rewards(
                question, [trajectories[c] for _, _, c in keys], [stats[(query, k)] for _, k, _ in keys], rollout_cfg
            )
            rewards.update(zip(keys, values.tolist()))
    slot_rewards = alignment.gather(rewards)
    advantages = sub_advantages(
        slot_rewards, alignment.weight, algo.advantages
    )  # docs/method.md §Group-relative advantages
    rows: list[BatchRow] = []
    for slot in alignment.slots():
        query = plan.query_ids[slot.query]
        s = stats.get((query, slot.rollout))
        prefix = f"{query}/{s.attempt if s else '-'}/r{slot.rollout}"
        if slot.kind == SlotKind.PLACEHOLDER:
            failed = s is None or s.failed
            rows.append(placeholder_row(f"{prefix}/-#{slot.index}", "failed" if failed else "placeholder"))
            continue
        where = (slot.query, slot.rollout, slot.index)
        traj = trajectories[str(slot.call_id)]
        rows.append(
            trajectory_row(
                traj,
                f"{prefix}/{slot.call_id}#{slot.index}",
                _KIND[slot.kind],
                float(advantages[where]),
                float(slot_rewards[where]),
                group=slot.query,  # the query's D·K aligned slots
            )
        )
    batch = rows_to_batch(plan.run_id, side, plan.step, batch_id(plan.run_id, side, plan.step), rows, d=d)
    return batch, _metrics(plan, stats, trajectories, alignment, rewards, advantages), alignment


def failed_and_lost(
    plan: StepPlan, stats: Mapping[RolloutKey, RewardStats], trajectories: Mapping[str, Trajectory]
) -> dict[str, float]:
    """Rollouts of the plan that failed or never reported, and sub calls named by a rollout whose trajectory never
    came."""
    failed = sum(
        1 for q in plan.query_ids for k in range(plan.num_rollouts) if (s := stats.get((q, k))) is None or s.failed
    )
    lost = sum(1 for s in stats.values() if not s.failed for c in s.sub_call_ids if c not in trajectories)
    return {"failed_rollouts": float(failed), "lost": float(lost)}


def _metrics(
    plan, stats, trajectories, alignment: AlignmentPlan, rewards: dict, advantages: np.ndarray
) -> dict[str, float]:  # type: ignore[no-untyped-def]
    values = list(rewards.values())
    counted = alignment.weight > 0
    summary = alignment.summary()
    return {
        "reward_mean": float(np.mean(values)) if values else 0.0,
        "calls": float(len(values)),
        "d": float(alignment.d),
        "dk_mean": float(alignment.observed.mean()),
        "dk_max": float(alignment.observed.max()),
        "samples": float(summary["samples"]),
        "original": float(summary["original"]),
        "duplicates": float(summary["duplicate"]),
        "placeholders": float(summary["placeholder"]),
        "dropped": float(summary["dropped"]),
        **failed_and_lost(plan, stats, trajectories),
        "advantage_abs_mean": float(np.abs(advantages[counted]).mean()) if counted.any() else 0.0,
    }
