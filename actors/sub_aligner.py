"""The sub aligner: for each of the step's B queries, the K RewardStats (the only numbers that cross
from the main side) and the sub trajectories they name → R_S, alignment of every rollout to D, pooled
advantages over D·K → exactly B·K·D samples on the sub learner's stream (docs/architecture.md §One training step,
step 5; the math, the step's completeness, its extra figures and the D update are mgrpo_actors/alignment/sub.py,
what is held of a step mgrpo_actors/alignment/holding.py). It reads only sub-side streams, the
stats and the controller's plan; `D: auto` is re-estimated between steps, never within one.
`algo.alignment.mode: none` (the ablation) fills the B·K·D samples first-in-first-out instead
(mgrpo_actors/alignment/unaligned.py)."""

from __future__ import annotations

import json
from typing import Any

from actors.aligner import AlignerActor
from mgrpo_actors.agents.setup import load_task_questions, rollout_config
from mgrpo_actors.algo.alignment import DEstimator
from mgrpo_actors.alignment.holding import HeldStep
from mgrpo_actors.alignment.sub import (
    alignment_rng,
    build_sub_batch,
    observe_step,
    sub_complete,
    unknown_questions,
    unused_trajectories,
)
from mgrpo_actors.alignment.unaligned import build_unaligned_sub_batch
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring.publish import publish_metrics
from mgrpo_actors.runtime import Bus, Delivery
from protocols import AlignedBatch, RewardStats, StepPlan, Trajectory

__all__ = ["SubAlignerActor", "start_sub_aligner"]

D_ESTIMATOR_KEY = "d_estimator.sub"


class SubAlignerActor(AlignerActor):
    role = "sub-aligner"
    side = "sub"

    def on_start(self) -> None:
        super().on_start()
        # The questions' evidence is what the expert judge checks S's findings against.
        self.questions = load_task_questions(self.pipeline, self.config.tools).by_id
        self.rollout_cfg = rollout_config(self.config.agents, self.config.algo)
        self.d_estimator = DEstimator(self.config.algo.alignment)
        saved = self.bus.kv(self.bus.subjects.bucket("state-sub")).get(D_ESTIMATOR_KEY)
        if saved is not None:  # a restarted aligner goes on with the D and the window it had
            self.d_estimator.restore(json.loads(saved))
        self.consume_side("sub-aligner-stats")
        self.consume_side("sub-aligner")

    def handlers(self) -> dict:
        return {StepPlan: self.on_plan, RewardStats: self.on_stats, Trajectory: self.on_trajectory}

    def on_stats(self, stats: RewardStats, delivery: Delivery) -> Any:
        held = self.held_step(stats.step, delivery)
        if held is None:
            return None
        held.keep_first("stats", (stats.query_id, stats.rollout_index), stats)
        return self.try_publish(held)

    def on_trajectory(self, trajectory: Trajectory, delivery: Delivery) -> Any:
        if trajectory.side != "sub":
            raise ValueError(f"a {trajectory.side!r} trajectory on the sub trajectory stream")
        held = self.held_step(trajectory.step, delivery)
        if held is None:
            return None
        held.keep_first("trajectories", trajectory.call_id, trajectory)  # call ids name one attempt
        return self.try_publish(held)

    def complete(self, held: HeldStep) -> bool:
        assert held.plan is not None
        return sub_complete(held.plan, held.collection("stats"), held.collection("trajectories"))

    def build(self, held: HeldStep) -> tuple[AlignedBatch, dict[str, float]]:
        assert held.plan is not None
        stats, trajectories = held.collection("stats"), held.collection("trajectories")
        d = self.d_estimator.d  # fixed for the whole step (docs/method.md §Trajectory alignment)
        rng = alignment_rng(self.config.run.seed, held.step)
        unknown = unknown_questions(held.plan, self.questions)
        if unknown:  # its r_expert cannot be judged: β3 is folded for it (check tools.web_* / pipeline.dataset)
            self.log.error("questions unknown to the sub aligner", queries=unknown[:5], count=len(unknown))
        if self.config.algo.alignment.mode == "none":  # the ablation: first-in-first-out, no alignment
            batch, figures = build_unaligned_sub_batch(
                held.plan, stats, trajectories, d, self.config.algo, self.rollout_cfg, self.questions
            )
        else:
            batch, figures, _ = build_sub_batch(
                held.plan, stats, trajectories, d, rng, self.config.algo, self.rollout_cfg, self.questions
            )
        figures["unused"] = float(unused_trajectories(stats, trajectories))
        figures["unknown_questions"] = float(len(unknown))
        return batch, figures

    def after_publish(self, held: HeldStep) -> None:
        d_next, histogram = observe_step(self.d_estimator, held.collection("stats"))  # D: auto, between steps
        self.state.put(D_ESTIMATOR_KEY, json.dumps(self.d_estimator.state()).encode())
        for dk, count in histogram.items():
            publish_metrics(self.bus, "sub", {"dk_hist": count}, held.step, self.role, tags={"dk": str(dk)})
        publish_metrics(self.bus, "sub", {"d_next": d_next}, held.step, self.role)


def start_sub_aligner(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The sub side's aligner (one per run)."""
    started.append(SubAlignerActor.start_ready(bus, config))
