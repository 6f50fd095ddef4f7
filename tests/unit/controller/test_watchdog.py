"""The controller's stall watchdog (controller/watchdog.py), docs/architecture.md §Errors: on an injected clock it
fires once nothing moved for stall_timeout_s (plus rollout_timeout_s while a batch is still due), progress resets
it, repeats are no progress, and the stall names the step and what it waits for; off at 0, silent once finished."""

from __future__ import annotations

import pytest

from mgrpo_actors.controller.cursor import StepCursor
from mgrpo_actors.controller.watchdog import StallWatch
from protocols import StepAligned, StepDone

BOTH = ("main", "sub")
LEARNERS = {"main": StepDone, "sub": StepDone}  # advance_on: learners, both sides train


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def opened(steps: int = 3, **kwargs) -> StepCursor:
    cursor = StepCursor(steps=steps, steps_ahead=0, sides=BOTH, **kwargs)
    cursor.open_step(0)
    return cursor


def watch_of(clock: Clock, timeout_s: float = 60.0, rollout_timeout_s: float = 30.0) -> StallWatch:
    watch = StallWatch(timeout_s, rollout_timeout_s, clock=clock)
    watch.step_started(0, queries=4)
    return watch


def test_a_step_waiting_for_learners_stalls_after_the_timeout_and_names_them():
    clock, cursor = Clock(), opened()
    watch = watch_of(clock)
    for query in "abcd":
        assert watch.query_done(0, query) is not None
    assert watch.batch_out(0, "main") and watch.batch_out(0, "sub")
    clock.advance(59.9)
    assert watch.check(cursor, LEARNERS) is None
    clock.advance(0.2)
    stall = watch.check(cursor, LEARNERS)
    assert stall is not None and stall.step == 0 and stall.limit_s == 60.0 and stall.quiet_s == pytest.approx(60.1)
    assert stall.waiting_for == "main learner (StepDone), sub learner (StepDone)"
    assert stall.last_progress == "sub batch of step 0 out"
    assert stall.message().startswith("step 0 stalled 60 s (limit 60 s): waiting for main learner (StepDone)")
    clock.advance(600)
    assert watch.check(cursor, LEARNERS) is None  # once: the run is being stopped


def test_progress_resets_the_quiet_time_and_repeats_do_not():
    clock, cursor = Clock(), opened()
    watch = watch_of(clock, timeout_s=60.0, rollout_timeout_s=0.0)
    clock.advance(50)
    assert watch.query_done(0, "a") == 1
    clock.advance(50)
    assert watch.check(cursor, LEARNERS) is None  # 50 s since the query, not 100 s since the step started
    assert watch.query_done(0, "a") is None and watch.query_done(7, "x") is None  # a repeat, a closed step
    assert not watch.batch_out(7, "main")
    clock.advance(10)
    stall = watch.check(cursor, LEARNERS)
    assert stall is not None and stall.quiet_s == pytest.approx(60)
    assert stall.last_progress == "query a of step 0 done (1 of 4)"


def test_while_a_batch_is_due_the_aligners_timeout_comes_first_and_the_rollouts_are_named():
    clock, cursor = Clock(), opened()
    watch = watch_of(clock, timeout_s=60.0, rollout_timeout_s=30.0)
    watch.query_done(0, "a")
    clock.advance(89)
    assert watch.check(cursor, LEARNERS) is None  # 60 s + the aligners' 30 s
    clock.advance(1)
    stall = watch.check(cursor, LEARNERS)
    assert stall is not None and stall.limit_s == 90.0
    assert stall.waiting_for == (
        "rollouts (1 of 4 queries done), main aligner (StepAligned), main learner (StepDone), "
        "sub aligner (StepAligned), sub learner (StepDone)"
    )


def test_one_side_ready_one_batch_missing():
    clock, cursor = Clock(), opened()
    watch = watch_of(clock, timeout_s=10.0, rollout_timeout_s=5.0)
    watch.batch_out(0, "main")
    cursor.side_ready("main", 0)
    clock.advance(15)
    stall = watch.check(cursor, LEARNERS)
    # the rollouts are over once a batch is out; the sub batch is still due (10 + 5 s)
    assert stall is not None and stall.waiting_for == "sub aligner (StepAligned), sub learner (StepDone)"
    assert stall.limit_s == 15.0


def test_a_side_that_does_not_train_waits_for_its_batch_only():
    clock, cursor = Clock(), opened()
    watch = watch_of(clock, timeout_s=10.0, rollout_timeout_s=0.0)
    for query in "abcd":
        watch.query_done(0, query)
    clock.advance(10)
    stall = watch.check(cursor, {"main": StepDone, "sub": StepAligned})
    assert stall is not None
    assert stall.waiting_for == "main aligner (StepAligned), main learner (StepDone), sub aligner (StepAligned)"


def test_no_step_open_names_the_learner_versions_it_needs():
    clock = Clock()
    # advance_on: batches, lag 1: step 0 closed on its batches, step 1 too; step 2 needs version >= 1
    held = StepCursor(steps=3, steps_ahead=0, sides=BOTH, trained=BOTH, lag=1, next=2, versions={"main": 1, "sub": 0})
    watch = StallWatch(10.0, 30.0, clock=clock)
    watch.step_closed(1)
    clock.advance(10)
    stall = watch.check(held, LEARNERS)
    assert stall is not None and stall.step == 2 and stall.limit_s == 10.0  # no batch is due
    assert stall.waiting_for == "sub learner (StepDone: version 0 of at least 1) before step 2 may start"
    # every step closed, the run ends once every learner applied the last one
    last = StepCursor(steps=3, steps_ahead=0, sides=BOTH, trained=BOTH, lag=1, next=3, versions={"main": 3, "sub": 2})
    watch = StallWatch(10.0, 30.0, clock=clock)
    clock.advance(10)
    stall = watch.check(last, LEARNERS)
    assert stall is not None and stall.step == 2
    assert stall.waiting_for == "sub learner (StepDone: version 2 of at least 3) to end the run"


def test_off_at_zero_and_silent_once_the_run_is_finished():
    clock, cursor = Clock(), opened()
    off = watch_of(clock, timeout_s=0.0)
    clock.advance(1e9)
    assert off.check(cursor, LEARNERS) is None
    on = watch_of(clock, timeout_s=1.0, rollout_timeout_s=0.0)
    cursor.finished = True
    clock.advance(100)
    assert on.check(cursor, LEARNERS) is None


def test_a_resumed_step_does_not_guess_its_rollouts():
    clock, cursor = Clock(), opened()
    watch = StallWatch(5.0, 0.0, clock=clock)
    watch.step_started(0, None)
    clock.advance(5)
    stall = watch.check(cursor, LEARNERS)
    assert stall is not None and stall.last_progress == "step 0 resumed"
    assert not stall.waiting_for.startswith("rollouts")  # what arrived before the restart is unknown
