"""Which questions each step rolls out: B per step, walking the training questions in a seeded random
order that is drawn anew each epoch (or in file order with `shuffle: false`). A function of (seed,
step) alone, so a restarted controller resumes exactly where it was from its cursor (the step)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mgrpo_actors.envs.qa import Question

__all__ = ["StepSchedule"]


class StepSchedule:
    """The questions of step n: positions n·B … n·B + B − 1 of the epoch-by-epoch order."""

    def __init__(self, questions: Sequence[Question], per_step: int, seed: int, shuffle: bool) -> None:
        if per_step > len(questions):
            raise ValueError(f"pipeline.queries_per_step is {per_step} but the training split has only {len(questions)} questions")
        self.questions = list(questions)
        self.per_step = per_step
        self.seed = seed
        self.shuffle = shuffle

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.questions))
        return np.random.default_rng([self.seed, epoch, 11]).permutation(len(self.questions))

    def step(self, n: int) -> list[Question]:
        """The B questions of step n (a step never holds one question twice)."""
        size = len(self.questions)
        picked: list[Question] = []
        position = n * self.per_step
        while len(picked) < self.per_step:
            epoch, offset = divmod(position, size)
            order = self._epoch_order(epoch)
            take = order[offset : offset + self.per_step - len(picked)]
            # At an epoch boundary, skip questions this step already holds (the next epoch's order is new).
            picked += [self.questions[i] for i in take if self.questions[i] not in picked]
            position += len(take)
        return picked
