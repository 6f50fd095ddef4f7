"""The controller's cursor and step window (controller/cursor.py), docs/architecture.md §One training step, steps 1
and 6: one step at a time in sync mode, up to steps_ahead beyond the oldest open step in async mode; a step
finishes once every side is ready with it (repeats and late messages change nothing); the last step finishes the
run; a saved cursor resumes where it was."""

import json

import pytest

from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.controller.cursor import Readiness, StepCursor, gate
from protocols import StepAligned, StepDone

BOTH = ("main", "sub")


def publish_due(cursor):
    """What the controller does with the window: open every due step, in order."""
    due = cursor.due_steps()
    for step in due:
        cursor.open_step(step)
    return due


def finish(cursor, step, sides=BOTH):
    return [cursor.side_ready(side, step) for side in sides]


def test_sync_mode_publishes_one_step_at_a_time():
    cursor = StepCursor(steps=3, steps_ahead=0, sides=BOTH)
    assert publish_due(cursor) == [0]
    assert cursor.due_steps() == []  # step 0 is open: nothing more until it finishes
    assert cursor.side_ready("main", 0) is Readiness.WAITING
    assert cursor.open == {0: ["main"]} and cursor.due_steps() == []
    assert cursor.side_ready("sub", 0) is Readiness.FINISHED
    assert cursor.open == {} and cursor.next == 1 and not cursor.finished
    assert publish_due(cursor) == [1]


def test_async_mode_runs_up_to_steps_ahead_beyond_the_oldest_open_step():
    cursor = StepCursor(steps=6, steps_ahead=2, sides=BOTH)
    assert publish_due(cursor) == [0, 1, 2]
    assert cursor.open_steps() == [0, 1, 2]
    # step 1 finishing first moves nothing: the window hangs on the oldest open step
    assert finish(cursor, 1) == [Readiness.WAITING, Readiness.FINISHED]
    assert cursor.due_steps() == []
    assert finish(cursor, 0) == [Readiness.WAITING, Readiness.FINISHED]
    assert publish_due(cursor) == [3, 4]  # oldest open is now 2: up to 2 + 2
    assert cursor.open_steps() == [2, 3, 4] and cursor.next == 5


def test_the_window_never_passes_the_last_step():
    cursor = StepCursor(steps=2, steps_ahead=5, sides=BOTH)
    assert publish_due(cursor) == [0, 1]
    assert cursor.due_steps() == []


def test_finishing_the_last_step_finishes_the_run():
    cursor = StepCursor(steps=2, steps_ahead=0, sides=BOTH)
    for step in range(2):
        assert publish_due(cursor) == [step]
        assert finish(cursor, step) == [Readiness.WAITING, Readiness.FINISHED]
    assert cursor.finished and cursor.next == 2 and cursor.open == {}
    assert cursor.due_steps() == []
    assert cursor.side_ready("main", 1) is Readiness.IGNORED  # after the run: nothing changes


def test_an_earlier_step_open_keeps_the_run_going_after_the_last_one_finishes():
    cursor = StepCursor(steps=2, steps_ahead=1, sides=BOTH)
    publish_due(cursor)
    assert finish(cursor, 1)[-1] is Readiness.FINISHED
    assert not cursor.finished and cursor.open == {0: []}
    assert finish(cursor, 0)[-1] is Readiness.FINISHED
    assert cursor.finished


def test_a_repeat_or_late_side_ready_changes_nothing():
    cursor = StepCursor(steps=3, steps_ahead=0, sides=BOTH)
    publish_due(cursor)
    assert cursor.side_ready("sub", 0) is Readiness.WAITING
    assert cursor.side_ready("sub", 0) is Readiness.IGNORED  # a repeat (redelivered)
    assert cursor.side_ready("main", 1) is Readiness.IGNORED  # a step not published yet
    assert cursor.open == {0: ["sub"]}
    finish(cursor, 0, ("main",))
    assert cursor.side_ready("sub", 0) is Readiness.IGNORED  # a finished step's, late
    assert cursor.open == {} and cursor.next == 1


def test_a_single_agent_run_waits_only_for_main():
    cursor = StepCursor(steps=1, steps_ahead=0, sides=("main",))
    publish_due(cursor)
    assert cursor.side_ready("main", 0) is Readiness.FINISHED
    assert cursor.finished


def test_versions_keep_the_newest():
    cursor = StepCursor(steps=3, steps_ahead=0, sides=BOTH)
    assert cursor.versions == {"main": 0, "sub": 0}
    cursor.record_version("main", 3)
    cursor.record_version("main", 2)  # a report again of an older step
    cursor.record_version("sub", 1)
    assert cursor.versions == {"main": 3, "sub": 1}


def test_the_saved_form_and_a_resume_from_it():
    cursor = StepCursor(steps=5, steps_ahead=1, sides=BOTH)
    publish_due(cursor)
    cursor.side_ready("main", 0)
    cursor.record_version("main", 4)
    saved = cursor.to_json()
    assert json.loads(saved) == {
        "next": 2,
        "open": {"0": ["main"], "1": []},
        "finished": False,
        "versions": {"main": 4, "sub": 0},
    }
    resumed = StepCursor.from_json(saved.encode(), steps=5, steps_ahead=1, sides=BOTH)
    assert resumed == cursor
    assert resumed.due_steps() == []  # 0 and 1 are open: the window is full
    assert resumed.side_ready("sub", 0) is Readiness.FINISHED
    assert resumed.due_steps() == [2]


def test_nothing_saved_is_a_fresh_cursor():
    for raw in (None, b""):
        cursor = StepCursor.from_json(raw, steps=2, steps_ahead=0, sides=BOTH)
        assert (cursor.next, cursor.open, cursor.finished, cursor.versions) == (0, {}, False, {"main": 0, "sub": 0})


def test_a_finished_cursor_resumes_finished():
    raw = b'{"next": 2, "open": {}, "finished": true, "versions": {"main": 2, "sub": 2}}'
    cursor = StepCursor.from_json(raw, steps=2, steps_ahead=0, sides=BOTH)
    assert cursor.finished and cursor.due_steps() == [] and cursor.versions == {"main": 2, "sub": 2}


def test_the_cursor_for_a_config():
    config = load_config(NodeConfig, None, ["pipeline.steps=4", "pipeline.mode=async", "pipeline.max_staleness=2"])
    cursor = StepCursor.for_config(config)
    assert (cursor.steps, cursor.steps_ahead, cursor.sides) == (4, 2, ("main", "sub"))
    assert StepCursor.for_config(load_config(NodeConfig, None, ["pipeline.max_staleness=2"])).steps_ahead == 0


@pytest.mark.parametrize(
    ("overrides", "main", "sub"),
    [
        ([], StepDone, StepDone),  # both learners train: their StepDone ends the step
        (["pipeline.advance_on=batches"], StepAligned, StepAligned),
        (["run.method=main-only"], StepDone, StepAligned),  # a frozen S: its batch being out is enough
        (["learners.main.frozen=true"], StepAligned, StepDone),
    ],
)
def test_the_gate_of_each_side(overrides, main, sub):
    config = load_config(NodeConfig, None, overrides)
    assert (gate(config, "main"), gate(config, "sub")) == (main, sub)


def test_a_cursor_saved_in_another_form_is_refused_by_name():
    with pytest.raises(ValueError, match="lacks next, open"):
        StepCursor.from_json(
            '{"step": 3, "published": true, "ready": [], "finished": false, "versions": {}}', 4, 0, ("main",)
        )


def test_advance_on_batches_waits_for_learners_within_max_staleness():
    """The version bound: with `advance_on: batches` a step closes once its batches are out, yet no step s
    starts while a training side's version is below s − max_staleness (the learners' lag is bounded)."""
    config = load_config(NodeConfig, None, ["pipeline.steps=5", "pipeline.advance_on=batches"])
    cursor = StepCursor.for_config(config)
    assert (cursor.trained, cursor.lag) == (("main", "sub"), 1)
    assert publish_due(cursor) == [0]
    finish(cursor, 0)  # both batches out, no learner applied anything yet: version 0 >= 1 − 1
    assert publish_due(cursor) == [1]
    finish(cursor, 1)
    assert cursor.due_steps() == [] and cursor.held_by() == ["main", "sub"]  # step 2 needs version 1
    cursor.record_version("main", 1)
    assert cursor.due_steps() == [] and cursor.held_by() == ["sub"]
    cursor.record_version("sub", 1)
    assert publish_due(cursor) == [2] and cursor.held_by() == []


def test_the_bound_spares_a_frozen_side_and_survives_a_resume():
    config = load_config(NodeConfig, None, ["pipeline.steps=4", "pipeline.advance_on=batches", "run.method=main-only"])
    cursor = StepCursor.for_config(config)
    assert cursor.trained == ("main",)
    for step in range(2):
        publish_due(cursor)
        finish(cursor, step)
    cursor.record_version("main", 1)
    resumed = StepCursor.for_config(config, cursor.to_json())
    assert resumed.versions["main"] == 1 and publish_due(resumed) == [2]  # S never trains: nothing waits on it


def test_lockstep_sync_mode_is_never_held_by_the_bound():
    config = load_config(NodeConfig, None, ["pipeline.steps=3"])
    cursor = StepCursor.for_config(config)
    for step in range(3):
        assert publish_due(cursor) == [step]
        for side in BOTH:  # each learner's StepDone records its version, then gates the step (as the controller)
            cursor.record_version(side, step + 1)
            cursor.side_ready(side, step)
    assert cursor.finished


def test_with_advance_on_batches_the_run_ends_once_the_learners_applied_the_last_step():
    config = load_config(NodeConfig, None, ["pipeline.steps=2", "pipeline.advance_on=batches"])
    cursor = StepCursor.for_config(config)
    for step in range(2):
        publish_due(cursor)
        assert finish(cursor, step)[-1] is Readiness.FINISHED  # the step closes: its batches are out
        cursor.record_version("main", step)  # learners one step behind
        cursor.record_version("sub", step)
    assert not cursor.finished and not cursor.finish_if_learned()  # version 1 < 2 steps: a batch is unapplied
    cursor.record_version("main", 2)
    assert not cursor.finish_if_learned()
    cursor.record_version("sub", 2)
    assert cursor.finish_if_learned() and cursor.finished
    assert not cursor.finish_if_learned()  # once
