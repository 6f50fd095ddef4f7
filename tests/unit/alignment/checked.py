"""Every batch the alignment tests build also passes the learner's checks (learner/batch_checks.py): what an
aligner builds, a learner takes."""

from __future__ import annotations

import dataclasses

from mgrpo_actors.algo.config import AlgoConfig
from mgrpo_actors.learner.batch_checks import check_batch
from protocols import AlignedBatch, StepPlan


def checked(batch: AlignedBatch, plan: StepPlan, algo: AlgoConfig) -> AlignedBatch:
    """`batch`, once the learner's checks pass on it (BatchCheck otherwise). The tests hand their aligner a D of
    their own: it is the configured D here (test_batch_checks.py checks D against the config)."""
    samples_per_d = len(plan.query_ids) * plan.num_rollouts
    alignment = dataclasses.replace(algo.alignment, d=batch.d) if batch.side == "sub" else algo.alignment
    newest = int(batch.policy_versions.max(initial=0))  # the versions are the tests' own
    check_batch(
        batch,
        batch.run_id,
        batch.side,
        samples_per_d,
        alignment,
        algo.advantages,
        queries=len(plan.query_ids),
        newest_version=newest,
    )
    return batch
