"""The sub aligner of one sub-agent type (one per type per run): for each of the step's B queries, the K RewardStats of
the type (the only numbers that cross from the main side) and the type's trajectories they name → R_S, alignment of
every rollout to D, pooled advantages over D·K → exactly B·K·D samples on the sub learner's stream
(docs/architecture.md §One training step, step 5; the math, the step's completeness, its extra figures and the D
update are mgrpo_actors/alignment/sub.py, what is held of a step mgrpo_actors/alignment/holding.py). It reads only
sub-side streams, the stats and the controller's plan; `D: auto` is re-estimated between steps, never within one.
The ablations fill the B·K·D samples first-in-first-out instead (mgrpo_actors/alignment/unaligned.py):
`algo.alignment.mode: none` from a queue kept across steps (alignment/fifo_queue.py), saved in KV before each step's
record so a restarted aligner goes on with it (alignment/fifo_store.py); `none-per-step` from the step's own sub
trajectories."""

from __future__ import annotations

import json
from typing import Any

from actors.aligner import AlignerActor
from mgrpo_actors.agents.setup import load_task_questions, rollout_config
from mgrpo_actors.algo.alignment import DEstimator
from mgrpo_actors.alignment.fifo_store import QueueStore
from mgrpo_actors.alignment.holding import HeldStep
from mgrpo_actors.alignment.piece_checks import named_reason, stats_reason, trajectory_reason
from mgrpo_actors.alignment.sub import (
    alignment_rng,
    build_sub_batch,
    observe_step,
    sub_complete,
    unknown_questions,
    unused_trajectories,
)
from mgrpo_actors.alignment.unaligned import build_fifo_sub_batch, build_unaligned_sub_batch
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.monitoring.publish import publish_metrics
from mgrpo_actors.runtime import Bus, Delivery
from protocols import DEFAULT_SUB_TYPE, AlignedBatch, RewardStats, StepPlan, Trajectory

__all__ = ["SubAlignerActor", "start_sub_aligner"]


def d_estimator_key(sub_type: str = DEFAULT_SUB_TYPE) -> str:
    """The KV key (in the type's state bucket) of its D estimator's state."""
    return f"d_estimator.{sub_type}"


class SubAlignerActor(AlignerActor):
    role = "sub-aligner"

    def __init__(self, bus: Bus, config: NodeConfig, sub_type: str = DEFAULT_SUB_TYPE) -> None:
        self.side = sub_type  # this aligner's side: its sub-agent type
        self.work_durables = (f"{sub_type}-aligner", f"{sub_type}-aligner-stats")
        super().__init__(bus, config)
        self.d_key = d_estimator_key(sub_type)

    def on_start(self) -> None:
        super().on_start()
        # The questions' evidence is what the expert judge checks S's findings against.
        self.questions = load_task_questions(self.pipeline, self.config.tools).by_id
        self.rollout_cfg = rollout_config(self.config.agents, self.config.algo, self.config.agent(self.side))
        self.d_estimator = DEstimator(self.config.algo.alignment)
        saved = self.state.get(self.d_key)
        if saved is not None:  # a restarted aligner goes on with the D and the window it had
            self.d_estimator.restore(json.loads(saved))
        self.fifo = QueueStore(self.state, self.bus.max_bytes, self.side)
        if self.config.algo.alignment.mode == "none":
            self._restore_queue()
        self.consume_side(f"{self.side}-aligner-stats")
        self.consume_side(f"{self.side}-aligner")

    def _restore_queue(self) -> None:
        try:
            self.fifo.restore(lambda step: self.holding.published_record(step) is not None)
        except LookupError as exc:  # what KV kept of it is incomplete: start empty rather than not at all
            self.log.warning("the ablation's queue could not be restored: starting it empty", error=str(exc))
        self.log.info("ablation queue", rows=len(self.fifo.queue.rows), left_by_step=self.fifo.queue.step)

    def handlers(self) -> dict:
        return {StepPlan: self.on_plan, RewardStats: self.on_stats, Trajectory: self.on_trajectory}

    def on_stats(self, stats: RewardStats, delivery: Delivery) -> Any:
        held = self.held_step(stats.step, delivery)
        if held is None:
            return None
        self.admit(held, "stats", (stats.query_id, stats.rollout_index), stats, delivery)
        return self.try_publish(held)

    def on_trajectory(self, trajectory: Trajectory, delivery: Delivery) -> Any:
        if trajectory.side != self.side:
            raise ValueError(f"a {trajectory.side!r} trajectory on the {self.side} trajectory stream")
        held = self.held_step(trajectory.step, delivery)
        if held is None:
            return None
        self.admit(held, "trajectories", trajectory.call_id, trajectory, delivery)  # call ids name one attempt
        return self.try_publish(held)

    def piece_reason(self, held: HeldStep, piece: RewardStats | Trajectory) -> str | None:
        return stats_reason(piece) if isinstance(piece, RewardStats) else trajectory_reason(piece)

    def after_keep(self, held: HeldStep, piece: RewardStats | Trajectory) -> None:
        """A kept sub trajectory must belong to the rollout whose stats name it (whichever of the two came
        first): one that does not is refused, and so is every other copy of that call that does not; a copy
        that does takes the refused one's place."""
        trajectories = held.collection("trajectories")
        naming = {call: s for s in held.collection("stats").values() for call in s.sub_call_ids}
        calls = piece.sub_call_ids if isinstance(piece, RewardStats) else [piece.call_id]
        for call in (c for c in calls if c in naming):
            for alternate, _ in list(held.alternates.get(("trajectories", call), [])):
                if (reason := named_reason(alternate, naming[call])) is not None:
                    self.refuse(held, held.drop_alternate("trajectories", call, alternate), alternate, reason)
            while call in trajectories and (reason := named_reason(trajectories[call], naming[call])) is not None:
                refused = trajectories[call]
                self.refuse(held, held.drop_kept("trajectories", call), refused, reason)

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
        mode = self.config.algo.alignment.mode
        if mode == "none":  # the paper's unsynchronised ablation: a queue across steps
            self._one_step_per_queue(held)
            batch, figures, held.result = build_fifo_sub_batch(
                held.plan,
                stats,
                trajectories,
                d,
                self.config.algo,
                self.rollout_cfg,
                self.questions,
                self.fifo.queue,
                self.side,
            )
        elif mode == "none-per-step":  # first-in-first-out within the step, no alignment
            batch, figures = build_unaligned_sub_batch(
                held.plan, stats, trajectories, d, self.config.algo, self.rollout_cfg, self.questions, self.side
            )
        else:
            batch, figures, _ = build_sub_batch(
                held.plan, stats, trajectories, d, rng, self.config.algo, self.rollout_cfg, self.questions, self.side
            )
        figures["unused"] = float(unused_trajectories(stats, trajectories))
        figures["unknown_questions"] = float(len(unknown))
        return batch, figures

    def _one_step_per_queue(self, held: HeldStep) -> None:
        """Refuse to build a step while another one built from the same queue waits for its publish to be retried:
        both would take the same queued samples (the refused one is retried on a later tick)."""
        waiting = [s for s, other in self.holding.steps.items() if s != held.step and other.result is not None]
        if waiting:
            raise RuntimeError(f"step {held.step} waits for step {waiting[0]}'s batch: they take from one queue")

    def before_record(self, held: HeldStep) -> None:
        if self.config.algo.alignment.mode == "none":
            self.fifo.save(held.result, self.bus.run_id)

    def after_publish(self, held: HeldStep) -> None:
        if self.config.algo.alignment.mode == "none":
            self.fifo.advance(held.result)
        d_next, histogram = observe_step(self.d_estimator, held.collection("stats"))  # D: auto, between steps
        self.state.put(self.d_key, json.dumps(self.d_estimator.state()).encode())
        for dk, count in histogram.items():
            publish_metrics(self.bus, self.side, {"dk_hist": count}, held.step, self.role, tags={"dk": str(dk)})
        publish_metrics(self.bus, self.side, {"d_next": d_next}, held.step, self.role)


def start_sub_aligner(bus: Bus, config: NodeConfig, started: list[Any], sub_type: str = DEFAULT_SUB_TYPE) -> None:
    """The aligner of sub-agent type `sub_type` (one per type per run)."""
    started.append(SubAlignerActor.start_ready(bus, config, sub_type))
