"""The run's questions per step from its config (docs/method.md §Training schedule): stage 1's levels for the
first `pipeline.stage1_steps` steps, then stage 2's, each walked by a StepSchedule (controller/schedule.py).
Loading the dataset builds the agents' set-up, so only the controller (and a node checking its config) calls it."""

from __future__ import annotations

import random
from collections.abc import Sequence

from mgrpo_actors.agents.setup import load_task_questions
from mgrpo_actors.config import NodeConfig
from mgrpo_actors.controller.schedule import CurriculumSchedule, StepSchedule
from mgrpo_actors.envs.qa import Question

__all__ = ["named_questions", "question_pool", "step_schedule"]


def step_schedule(config: NodeConfig) -> CurriculumSchedule:
    """The run's questions per step (stage 1, then stage 2); ValueError naming the key if the dataset
    cannot fill a step."""
    pipeline, seed = config.pipeline, config.run.seed
    questions = load_task_questions(pipeline, config.tools)

    def walked(stage: int) -> StepSchedule:
        training = questions.training(pipeline, stage=stage)
        if pipeline.question_ids is not None:
            drawn = named_questions(training, pipeline.question_ids)
        else:
            drawn = question_pool(training, pipeline.question_pool, seed)
        return StepSchedule(drawn, pipeline.queries_per_step, seed, pipeline.shuffle)

    return CurriculumSchedule(walked(1) if pipeline.stage1_steps else None, pipeline.stage1_steps, walked(2))


def question_pool(questions: Sequence[Question], size: int, seed: int) -> list[Question]:
    """`pipeline.question_pool`: every question (size 0), or a fixed pool of `size` of them drawn with the run's
    seed (all of them when there are fewer), in their dataset order."""
    if not size or size >= len(questions):
        return list(questions)
    keep = sorted(random.Random(seed).sample(range(len(questions)), size))
    return [questions[i] for i in keep]


def named_questions(questions: Sequence[Question], ids: Sequence[str]) -> list[Question]:
    """`pipeline.question_ids`: those of `questions`, in the order named; ValueError naming any it lacks."""
    by_id = {question.id: question for question in questions}
    missing = [question_id for question_id in ids if question_id not in by_id]
    if missing:
        raise ValueError(
            f"pipeline.question_ids names {missing}, which the training split at the run's levels does not hold"
        )
    return [by_id[question_id] for question_id in ids]
