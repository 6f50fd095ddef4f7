"""Writes after a learner's optimizer step (mgrpo_actors/learner/after_step.py write_after_step): a passing
bus failure is tried again (the step itself cannot be redone in the process), anything else and the last
failure are raised."""

from __future__ import annotations

import nats.errors
import pytest
import structlog

from mgrpo_actors.learner.after_step import write_after_step
from mgrpo_actors.runtime import BusError


def _flaky(failures: list[BaseException], result: str = "stored"):  # noqa: ANN202
    calls = []

    def write() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return result

    return write, calls


def test_passing_bus_failures_are_tried_again_until_the_write_goes_through():
    write, calls = _flaky([nats.errors.TimeoutError(), BusError("reconnecting")])
    assert write_after_step(write, "weights", structlog.get_logger(), attempts=5, pause_s=0.0) == "stored"
    assert len(calls) == 3


def test_a_failure_that_is_not_the_bus_is_raised_at_once():
    write, calls = _flaky([FileNotFoundError("weights file gone")])
    with pytest.raises(FileNotFoundError):
        write_after_step(write, "weights", structlog.get_logger(), attempts=5, pause_s=0.0)
    assert len(calls) == 1


def test_the_last_passing_failure_is_raised_after_every_attempt():
    write, calls = _flaky([nats.errors.TimeoutError()] * 3)
    with pytest.raises(nats.errors.TimeoutError):
        write_after_step(write, "weights", structlog.get_logger(), attempts=3, pause_s=0.0)
    assert len(calls) == 3
