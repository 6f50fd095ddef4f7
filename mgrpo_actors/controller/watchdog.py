"""The controller's stall watchdog (docs/architecture.md §Errors, stalls): a run never hangs silently. When
nothing of the run moves for `pipeline.stall_timeout_s`, the controller (actors/controller.py) reports the stall,
naming the step and what it waits for, and stops the run (its node exits 3).

Progress is what the controller sees move the run: a step published, a query of an open step done (its first
QueryDone), a side's batch of an open step out (its first StepAligned), a learner's step applied (a StepDone that
readies a side or brings a newer version). A repeat or a late message moves nothing: a redelivered StepDone of a
closed step must not keep a hung run looking alive.

While a batch of the oldest open step is not out yet, the watchdog allows `pipeline.rollout_timeout_s` more quiet:
the aligners give up on missing rollouts that long after the plan and publish what arrived (counted as failed), a
recovery the watchdog must not pre-empt. Once every batch is out, only learners can move the step, and nothing
else would notice if they never do (a de-duplicated batch, a deleted consumer, a learner that is not running).

Pure logic with an injected clock; what each side's gate is comes from controller/cursor.py `gate`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mgrpo_actors.controller.cursor import StepCursor
from protocols import StepAligned, StepDone

__all__ = ["Stall", "StallWatch", "Wait"]


@dataclass(frozen=True)
class Wait:
    """What the run waits for now: the step it is held at, what would move it, and whether a batch of it is still
    due (the aligners' own timeout may still end it)."""

    step: int
    what: str
    batch_due: bool


@dataclass(frozen=True)
class Stall:
    """A stall the watchdog found: how long nothing moved, against what limit, waiting for what."""

    step: int
    quiet_s: float
    limit_s: float
    waiting_for: str
    last_progress: str

    def message(self) -> str:
        """One line for people: the step, how long, what it waits for, what moved last."""
        return (
            f"step {self.step} stalled {self.quiet_s:.0f} s (limit {self.limit_s:g} s): waiting for "
            f"{self.waiting_for}; last progress: {self.last_progress}"
        )


class StallWatch:
    """The time of the run's last progress and what each open step has shown so far.

    `timeout_s` 0 turns the watchdog off (`check` never fires); `rollout_timeout_s` is the aligners' timeout, added
    while a batch is due. `check` fires once: after that the run is being stopped."""

    def __init__(self, timeout_s: float, rollout_timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self.rollout_timeout_s = rollout_timeout_s
        self._clock = clock
        self.last_progress_at = clock()
        self.last_progress = "controller started"
        self.fired = False
        self.queries: dict[int, set[str]] = {}  # open step → the queries reported done (QueryDone)
        # open step → its queries (B); None for a step resumed after a restart: what it saw before is unknown
        self.query_count: dict[int, int | None] = {}
        self.aligned: dict[int, set[str]] = {}  # open step → the sides whose batch is out (StepAligned)

    def progressed(self, what: str) -> None:
        """Something moved the run: the quiet time starts again."""
        self.last_progress_at = self._clock()
        self.last_progress = what

    def step_started(self, step: int, queries: int | None) -> None:
        """`step` is open with `queries` queries (None: resumed after a restart, what arrived before is unknown)."""
        self.queries[step], self.query_count[step], self.aligned[step] = set(), queries, set()
        self.progressed(f"step {step} {'resumed' if queries is None else 'started'}")

    def query_done(self, step: int, query_id: str) -> int | None:
        """A QueryDone: the step's count of queries done if it moved the step, None for a closed step or a repeat."""
        seen = self.queries.get(step)
        if seen is None or query_id in seen:
            return None
        seen.add(query_id)
        self.progressed(f"query {query_id} of step {step} done ({len(seen)} of {self.query_count[step] or '?'})")
        return len(seen)

    def batch_out(self, step: int, side: str) -> bool:
        """A StepAligned: True if it moved the step (the side's first for an open step)."""
        sides = self.aligned.get(step)
        if sides is None or side in sides:
            return False
        sides.add(side)
        self.progressed(f"{side} batch of step {step} out")
        return True

    def step_closed(self, step: int) -> None:
        """`step` finished: nothing of it is watched any more (the next step's start is the progress)."""
        for held in (self.queries, self.query_count, self.aligned):
            held.pop(step, None)
        self.progressed(f"step {step} finished")

    def waiting(self, cursor: StepCursor, gates: Mapping[str, type]) -> Wait | None:
        """What the run waits for now (None once it is finished): the oldest open step's missing queries, batches
        and learner steps (`gates`: each side's gate message), or, with no step open, the learner versions the next
        step or the run's end needs."""
        if cursor.finished:
            return None
        if cursor.open:
            return self._waiting_in_step(min(cursor.open), cursor, gates)
        return _waiting_for_versions(cursor)

    def _waiting_in_step(self, step: int, cursor: StepCursor, gates: Mapping[str, type]) -> Wait:
        aligned, done = self.aligned.get(step, set()), len(self.queries.get(step, ()))
        total = self.query_count.get(step)
        rollouts = not aligned and total is not None and done < total  # once a batch is out, the rollouts are over
        parts = [f"rollouts ({done} of {total} queries done)"] if rollouts else []
        for side in (side for side in cursor.sides if side not in cursor.open[step]):
            if gates[side] is StepAligned or side not in aligned:
                parts.append(f"{side} aligner (StepAligned)")
            if gates[side] is StepDone:
                parts.append(f"{side} learner (StepDone)")
        batch_due = any(side not in aligned for side in cursor.sides)
        return Wait(step, ", ".join(parts) or "nothing this controller knows of", batch_due)

    def check(self, cursor: StepCursor, gates: Mapping[str, type]) -> Stall | None:
        """The stall, if nothing moved for longer than allowed (once; never when off or when the run is finished)."""
        if self.timeout_s <= 0 or self.fired:
            return None
        wait = self.waiting(cursor, gates)
        if wait is None:
            return None
        limit_s = self.timeout_s + (self.rollout_timeout_s if wait.batch_due else 0.0)
        quiet_s = self._clock() - self.last_progress_at
        if quiet_s < limit_s:
            return None
        self.fired = True
        return Stall(wait.step, quiet_s, limit_s, wait.what, self.last_progress)


def _waiting_for_versions(cursor: StepCursor) -> Wait:
    """No step open and the run not finished: learners hold the next step back (the version bound), or the last
    step's batches are out and the run ends once every learner applied them (`advance_on: batches`)."""
    if cursor.next < cursor.steps:
        behind, step, before = cursor.held_by(), cursor.next, f" before step {cursor.next} may start"
        needed = cursor.next - (cursor.lag or 0)
    else:
        needed, step, before = cursor.steps, cursor.steps - 1, " to end the run"
        behind = [side for side in cursor.trained if cursor.versions.get(side, 0) < needed]
    what = ", ".join(
        f"{side} learner (StepDone: version {cursor.versions.get(side, 0)} of at least {needed})" for side in behind
    )
    return Wait(step, (what + before) if what else "nothing this controller knows of", batch_due=False)
