"""The controller's cursor and its step window (docs/architecture.md §One training step, steps 1 and 6): which
steps are published and unfinished, which sides are done with each, when the next step may start, and the
newest policy version each side announced. Plain data: the controller actor (actors/controller.py) keeps it
in KV (bucket `state`, key `controller.cursor`) and publishes what it says is due.

Sync mode: a step is due only when none is open. Async mode (docs/architecture.md, asynchronous mode): up to
`pipeline.steps_ahead` (= max_staleness) steps beyond the oldest unfinished one. A side is ready with a step on
its gate message (`gate`): its learner's StepDone, or its StepAligned for a side that does not train.

The version bound: a step s is due only once every side that trains has announced version >= s − max_staleness
(a side's version counts the batches its learner applied). With `advance_on: learners` the gate already keeps
it; with `advance_on: batches` a step ends once its batches are out, so without the bound rollouts could run any
number of steps ahead of slow learners, on ever older weights (unbounded off-policy data). The learners drop
what is staler still (learner/batch_filters.py).

Saved form: {"next": the next step to publish, "open": {step: [sides ready]} for the published, unfinished
steps, "finished": bool, "versions": {side: newest policy version}}.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from mgrpo_actors.config import NodeConfig
from protocols import StepAligned, StepDone

__all__ = ["Readiness", "StepCursor", "gate"]


class Readiness(enum.Enum):
    """What a side's ready message did to the cursor."""

    IGNORED = "ignored"  # an earlier step's, a repeat, or after the run finished: nothing changed to save
    WAITING = "waiting"  # recorded; the step still waits for another side
    FINISHED = "finished"  # the step's last side: the step is closed (and the run, if it was the last)


def gate(config: NodeConfig, side: str) -> type[StepDone] | type[StepAligned]:
    """What ends a step for a side: its learner's StepDone, or its StepAligned (an agent that does not train,
    or `pipeline.advance_on: batches`)."""
    trains = config.pipeline.advance_on == "learners" and config.trains(side)
    return StepDone if trains else StepAligned


@dataclass
class StepCursor:
    """The run's steps: `steps` in all, at most `steps_ahead` beyond the oldest open one, each finished once
    every one of `sides` is ready with it. Only next/open/finished/versions are saved (`to_json`)."""

    steps: int
    steps_ahead: int
    sides: tuple[str, ...]
    # The version bound: sides that train, and how many versions behind a step their policy may be (None: no bound).
    trained: tuple[str, ...] = ()
    lag: int | None = None
    next: int = 0
    open: dict[int, list[str]] = field(default_factory=dict)  # insertion order = publishing order
    finished: bool = False
    versions: dict[str, int] = field(default_factory=dict)  # each side's newest policy version (0 until one is heard)

    def __post_init__(self) -> None:
        self.versions = {side: self.versions.get(side, 0) for side in self.sides}

    @classmethod
    def for_config(cls, config: NodeConfig, raw: bytes | str | None = None) -> StepCursor:
        """The cursor of the run `config` describes, as saved in `raw` (None: a fresh one), version bound included."""
        pipeline, sides = config.pipeline, tuple(config.sides)
        trained = tuple(side for side in sides if config.trains(side))
        lag = pipeline.max_staleness
        return cls.from_json(raw, pipeline.steps, pipeline.steps_ahead, sides, trained=trained, lag=lag)

    @classmethod
    def from_json(
        cls,
        raw: bytes | str | None,
        steps: int,
        steps_ahead: int,
        sides: tuple[str, ...],
        *,
        trained: tuple[str, ...] = (),
        lag: int | None = None,
    ) -> StepCursor:
        """The cursor saved as `raw`, or a fresh one when nothing was saved (a new run)."""
        cursor = cls(steps, steps_ahead, sides, trained=trained, lag=lag)
        if raw:
            saved = json.loads(raw)
            missing = [key for key in ("next", "open", "finished", "versions") if key not in saved]
            if missing:
                raise ValueError(
                    f"the saved controller cursor lacks {', '.join(missing)}: it is not this version's form "
                    "(start the run afresh under another run.id)"
                )
            # A run saved with other sides than the config's (other sub-agent types) cannot go on under it. Every
            # side is saved; the one exception, an earlier version's single agent, also saved "sub": 0.
            versions = saved["versions"]
            ready = [side for sides_ready in saved["open"].values() for side in sides_ready]
            single_agent = sides == ("main",) and set(versions) == {"main", "sub"} and int(versions["sub"]) == 0
            if set(versions) != set(sides) and not (single_agent and "sub" not in ready):
                raise ValueError(
                    f"the saved controller cursor is of a run with sides {', '.join(versions)}; the config has "
                    f"{', '.join(sides)}: resume it with its own config (agents.subs), or start afresh"
                )
            cursor.next, cursor.finished = int(saved["next"]), bool(saved["finished"])
            cursor.open = {int(step): list(ready) for step, ready in saved["open"].items()}
            cursor.versions |= {side: int(v) for side, v in versions.items() if side in sides}
        return cursor

    def to_json(self) -> str:
        """The saved form (JSON object keys are strings: steps as "0", "1", …)."""
        open_steps = {str(step): ready for step, ready in self.open.items()}
        return json.dumps({"next": self.next, "open": open_steps, "finished": self.finished, "versions": self.versions})

    def open_steps(self) -> list[int]:
        """The published, unfinished steps, oldest first."""
        return sorted(self.open)

    def due_steps(self) -> list[int]:
        """The steps to publish now, in order: from `next` up to `steps_ahead` beyond the oldest open step
        (the first one published becomes the oldest when none is open), never past the last step, none that the
        version bound holds back."""
        return [step for step in self._window() if self.within_lag(step)]

    def _window(self) -> range:
        """The steps the window allows now, before the version bound."""
        oldest = min(self.open, default=self.next)
        return range(self.next, min(self.steps, oldest + self.steps_ahead + 1))

    def within_lag(self, step: int) -> bool:
        """Whether every side that trains is at most `lag` versions behind `step` (the version bound)."""
        return self.lag is None or all(self.versions.get(side, 0) >= step - self.lag for side in self.trained)

    def held_by(self) -> list[str]:
        """The sides whose learners hold back the next step, which the window alone would let start (the version
        bound), for the log."""
        if self.lag is None or self.next not in self._window():
            return []
        return [side for side in self.trained if self.versions.get(side, 0) < self.next - self.lag]

    def open_step(self, step: int) -> None:
        """`step` is published: open it with no side ready; the next one to publish follows it."""
        self.open[step] = []
        self.next = step + 1

    def record_version(self, side: str, version: int) -> None:
        """A version `side`'s learner produced: the newest one wins (a repeat or a late report is older)."""
        self.versions[side] = max(version, self.versions.get(side, 0))

    def side_ready(self, side: str, step: int) -> Readiness:
        """`side` is done with `step` (its gate message arrived). The last side closes the step; closing the
        last open step after every step was published finishes the run."""
        ready = self.open.get(step)
        if self.finished or ready is None or side in ready:
            return Readiness.IGNORED
        self.open[step] = sorted({*ready, side})
        if set(self.open[step]) != set(self.sides):
            return Readiness.WAITING
        del self.open[step]
        self.finished = self.next >= self.steps and not self.open and self.learned_all()
        return Readiness.FINISHED

    def learned_all(self) -> bool:
        """Whether every side that trains applied every step (its version counts the batches applied): with
        `advance_on: batches` the last step closes once its batches are out, and the run ends only after this."""
        return all(self.versions.get(side, 0) >= self.steps for side in self.trained)

    def finish_if_learned(self) -> bool:
        """After a version arrived: finish the run if every step is closed and every learner is done with it.
        True if this finished it."""
        if self.finished or self.next < self.steps or self.open or not self.learned_all():
            return False
        self.finished = True
        return True
