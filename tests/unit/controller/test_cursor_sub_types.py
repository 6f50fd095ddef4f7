"""The controller's cursor with several sub-agent types (controller/cursor.py): a version per side it is given, types
included; a step waits for every type; a saved cursor restores, and one saved by a one-type run reads as before."""

from __future__ import annotations

import json

from mgrpo_actors.config import NodeConfig, load_config
from mgrpo_actors.controller.cursor import Readiness, StepCursor

THREE = ("main", "searcher", "calculator")
TWO_TYPES = [
    "agents.subs.searcher.model=tiny:sub",
    "tools.serve=[search, visit, calculator]",
    "agents.subs.calculator.tools=[calculator]",
    "agents.subs.calculator.description=computes",
]


def test_every_side_it_is_given_starts_at_version_0():
    assert StepCursor(steps=3, steps_ahead=0, sides=THREE).versions == {"main": 0, "searcher": 0, "calculator": 0}
    assert StepCursor(steps=3, steps_ahead=0, sides=("main",)).versions == {"main": 0}  # the single agent: no sub


def test_a_types_version_is_its_own():
    cursor = StepCursor(steps=3, steps_ahead=0, sides=THREE)
    cursor.record_version("calculator", 2)
    cursor.record_version("calculator", 1)  # a late report: older
    cursor.record_version("searcher", 1)
    assert cursor.versions == {"main": 0, "searcher": 1, "calculator": 2}


def test_a_step_finishes_once_every_type_is_ready():
    cursor = StepCursor(steps=2, steps_ahead=0, sides=THREE)
    cursor.open_step(0)
    assert cursor.side_ready("main", 0) is Readiness.WAITING
    assert cursor.side_ready("calculator", 0) is Readiness.WAITING
    assert cursor.side_ready("searcher", 0) is Readiness.FINISHED


def test_a_saved_cursor_with_types_restores():
    cursor = StepCursor(steps=5, steps_ahead=1, sides=THREE)
    for step in cursor.due_steps():
        cursor.open_step(step)
    cursor.side_ready("searcher", 1)
    cursor.record_version("calculator", 3)
    resumed = StepCursor.from_json(cursor.to_json(), steps=5, steps_ahead=1, sides=THREE)
    assert (resumed.next, resumed.open, resumed.finished) == (2, {0: [], 1: ["searcher"]}, False)
    assert resumed.versions == {"main": 0, "searcher": 0, "calculator": 3}


def test_a_cursor_saved_by_a_one_type_run_reads_as_before():
    saved = '{"next": 3, "open": {"2": ["main"]}, "finished": false, "versions": {"main": 2, "sub": 1}}'
    cursor = StepCursor.from_json(saved, steps=4, steps_ahead=0, sides=("main", "sub"))
    assert (cursor.next, cursor.open, cursor.versions) == (3, {2: ["main"]}, {"main": 2, "sub": 1})
    assert cursor.side_ready("sub", 2) is Readiness.FINISHED
    assert json.loads(cursor.to_json())["versions"] == {"main": 2, "sub": 1}


def test_a_side_the_saved_cursor_lacks_starts_at_version_0():
    saved = '{"next": 1, "open": {}, "finished": false, "versions": {"main": 1}}'
    cursor = StepCursor.from_json(saved, steps=4, steps_ahead=0, sides=THREE)
    assert cursor.versions == {"main": 1, "searcher": 0, "calculator": 0}


def test_the_version_bound_holds_on_a_lagging_type_that_trains():
    config = load_config(NodeConfig, None, [*TWO_TYPES, "pipeline.steps=4", "pipeline.advance_on=batches"])
    cursor = StepCursor.for_config(config)
    assert cursor.sides == THREE and cursor.trained == THREE
    for step in range(2):
        for due in cursor.due_steps():
            cursor.open_step(due)
        for side in THREE:
            cursor.side_ready(side, step)
    cursor.record_version("main", 1)
    cursor.record_version("searcher", 1)
    assert cursor.due_steps() == [] and cursor.held_by() == ["calculator"]
    cursor.record_version("calculator", 1)
    assert cursor.due_steps() == [2]


def test_the_version_bound_spares_a_frozen_type():
    config = load_config(NodeConfig, None, [*TWO_TYPES, "learners.subs.calculator.frozen=true"])
    assert StepCursor.for_config(config).trained == ("main", "searcher")
