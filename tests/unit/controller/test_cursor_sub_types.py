"""The controller's cursor with several sub-agent types (controller/cursor.py): a version per side it is given, types
included; a step waits for every type; a saved cursor restores, and one saved by a one-type run reads as before."""

from __future__ import annotations

import json

import pytest

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


@pytest.mark.parametrize(
    ("versions", "sides"),
    [
        ({"main": 1}, THREE),  # a single-agent run's cursor under a config with types
        ({"main": 2, "sub": 0}, THREE),  # a one-type run's, its sub side never stepped yet
        ({"main": 2, "searcher": 0, "calculator": 0}, ("main", "sub")),  # a run with types under a one-type config
    ],
)
def test_a_cursor_saved_with_other_sides_than_the_configs_is_refused(versions, sides):
    saved = json.dumps({"next": 1, "open": {}, "finished": False, "versions": versions})
    with pytest.raises(ValueError, match="resume it with its own config"):
        StepCursor.from_json(saved, steps=4, steps_ahead=0, sides=sides)


def test_an_earlier_versions_single_agent_cursor_resumes():
    saved = '{"next": 2, "open": {"1": ["main"]}, "finished": false, "versions": {"main": 1, "sub": 0}}'
    cursor = StepCursor.from_json(saved, steps=4, steps_ahead=0, sides=("main",))
    assert cursor.versions == {"main": 1} and cursor.open == {1: ["main"]}


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
