"""The run's questions per step from its config (docs/method.md §Training schedule): stage 1's levels for the
first `pipeline.stage1_steps` steps, then stage 2's, each walked by a StepSchedule (controller/schedule.py).
Loading the dataset builds the agents' set-up, so only the controller (and a node checking its config) calls it."""

from __future__ import annotations

from mgrpo_actors.agents.setup import load_task_questions
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.controller.schedule import CurriculumSchedule, StepSchedule

__all__ = ["step_schedule"]


def step_schedule(config: NodeConfig) -> CurriculumSchedule:
    """The run's questions per step (stage 1, then stage 2); ValueError naming the key if the dataset
    cannot fill a step."""
    pipeline, seed = config.pipeline, config.run.seed
    questions = load_task_questions(pipeline, config.tools)
    stage1 = (
        StepSchedule(questions.training(pipeline, stage=1), pipeline.queries_per_step, seed, pipeline.shuffle)
        if pipeline.stage1_steps
        else None
    )
    stage2 = StepSchedule(questions.training(pipeline), pipeline.queries_per_step, seed, pipeline.shuffle)
    return CurriculumSchedule(stage1, pipeline.stage1_steps, stage2)
