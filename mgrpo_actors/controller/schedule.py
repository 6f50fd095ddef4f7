"""Which questions each step rolls out: B per step, walking the training questions in a seeded random
order that is drawn anew each epoch (or in file order with `shuffle: false`). A function of (seed,
step) alone, so a restarted controller resumes exactly where it was from its cursor (the step)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from mgrpo_actors.envs.qa import Question

__all__ = ["CurriculumSchedule", "StepSchedule", "node_seed"]


class StepSchedule:
    """The questions of step n: positions n·B … n·B + B − 1 of the epoch-by-epoch order."""

    def __init__(self, questions: Sequence[Question], per_step: int, seed: int, shuffle: bool) -> None:
        if per_step > len(questions):
            raise ValueError(
                f"pipeline.queries_per_step is {per_step} but the training split has only {len(questions)} questions"
            )
        self.questions = list(questions)
        self.per_step = per_step
        self.seed = seed
        self.shuffle = shuffle
        self._cached: tuple[int, np.ndarray] | None = None  # the last epoch order computed (epochs chain)

    def _raw_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.questions))
        return np.random.default_rng([self.seed, epoch, 11]).permutation(len(self.questions))

    def _epoch_order(self, epoch: int) -> np.ndarray:
        """Epoch `epoch`'s order: its seeded permutation, except that when a step straddles the boundary
        with the previous epoch, the questions that step already took from the previous epoch are moved
        out of this epoch's head (just behind it). Every epoch stays a permutation, so each step takes
        exactly its B positions and every epoch serves every question once."""
        if self._cached is None or self._cached[0] > epoch:
            self._cached = (0, self._raw_order(0))
        current, order = self._cached
        size, per_step = len(self.questions), self.per_step
        while current < epoch:
            current += 1
            start = current * size  # first position of the new epoch
            # the straddling step's part in the old epoch
            tail = order[(start // per_step) * per_step - (current - 1) * size :]
            order = self._raw_order(current)
            if len(tail):
                head_len = per_step - len(tail)
                fresh = np.flatnonzero(~np.isin(order, tail))[:head_len]
                order = np.concatenate([order[fresh], np.delete(order, fresh)])
            self._cached = (current, order)
        return order

    def step(self, n: int) -> list[Question]:
        """The B questions of step n (a step never holds one question twice)."""
        size = len(self.questions)
        picked: list[int] = []
        for position in range(n * self.per_step, (n + 1) * self.per_step):
            epoch, offset = divmod(position, size)
            picked.append(int(self._epoch_order(epoch)[offset]))
        assert len(set(picked)) == len(picked), picked
        return [self.questions[i] for i in picked]


def node_seed(node: str) -> int:
    """A number per node name, so processes of one run draw different samples from the same run seed."""
    return zlib.crc32(node.encode())


class CurriculumSchedule:
    """Stage 1 then stage 2 (docs/method.md §Training schedule): steps 0 … stage1_steps − 1 walk the stage-1
    questions, later steps walk the stage-2 ones from their own start. Still a function of the step alone."""

    def __init__(self, stage1: StepSchedule | None, stage1_steps: int, stage2: StepSchedule) -> None:
        if stage1_steps and stage1 is None:
            raise ValueError("a curriculum with stage-1 steps needs stage-1 questions")
        self.stage1, self.stage1_steps, self.stage2 = stage1, stage1_steps, stage2

    def stage(self, n: int) -> int:
        """1 or 2: the stage step n belongs to."""
        return 1 if n < self.stage1_steps else 2

    def step(self, n: int) -> list[Question]:
        """The B questions of step n."""
        if self.stage(n) == 1:
            assert self.stage1 is not None
            return self.stage1.step(n)
        return self.stage2.step(n - self.stage1_steps)
