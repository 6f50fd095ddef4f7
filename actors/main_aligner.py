"""The main aligner: M's K trajectories of each of the step's B queries → group advantages → exactly
B·K samples on the main learner's stream (docs/architecture.md §One training step, step 5; the math is
mgrpo_actors/alignment/main.py, what is held of a step mgrpo_actors/alignment/holding.py). It reads only
main-side streams and the controller's plan."""

from __future__ import annotations

from typing import Any

from actors.aligner import AlignerActor
from mgrpo_actors.alignment.holding import HeldStep
from mgrpo_actors.alignment.main import build_main_batch, main_complete
from mgrpo_actors.alignment.piece_checks import trajectory_reason
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.runtime import Bus, Delivery
from protocols import AlignedBatch, StepPlan, Trajectory

__all__ = ["MainAlignerActor", "start_main_aligner"]


class MainAlignerActor(AlignerActor):
    role = "main-aligner"
    side = "main"
    work_durables = ("main-aligner",)

    def on_start(self) -> None:
        super().on_start()
        self.consume_side("main-aligner")

    def handlers(self) -> dict:
        return {StepPlan: self.on_plan, Trajectory: self.on_trajectory}

    def on_trajectory(self, trajectory: Trajectory, delivery: Delivery) -> Any:
        if trajectory.side != "main":
            raise ValueError(f"a {trajectory.side!r} trajectory on the main trajectory stream")
        held = self.held_step(trajectory.step, delivery)
        if held is None:
            return None
        self.admit(held, "trajectories", (trajectory.query_id, trajectory.rollout_index), trajectory, delivery)
        return self.try_publish(held)

    def piece_reason(self, held: HeldStep, piece: Trajectory) -> str | None:
        return trajectory_reason(piece)

    def complete(self, held: HeldStep) -> bool:
        assert held.plan is not None
        return main_complete(held.plan, held.collection("trajectories"))

    def build(self, held: HeldStep) -> tuple[AlignedBatch, dict[str, float]]:
        assert held.plan is not None
        return build_main_batch(held.plan, held.collection("trajectories"), self.config.algo)


def start_main_aligner(bus: Bus, config: NodeConfig, started: list[Any]) -> None:
    """The main side's aligner (one per run)."""
    started.append(MainAlignerActor.start_ready(bus, config))
