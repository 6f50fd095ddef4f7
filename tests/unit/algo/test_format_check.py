"""Trajectory-level r_format from per-turn parse results."""

import pytest

from mgrpo_actors.algo.format_check import FormatCheck, r_format, trajectory_format_ok


def test_valid_trajectory():
    check = trajectory_format_ok([None, None], ended_with_answer=True)
    assert check == FormatCheck(True, None) and r_format(check) == 1.0
    ok, reason = check
    assert ok and reason is None


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"turn_errors": [], "ended_with_answer": True}, "no turns"),
        ({"turn_errors": [None, "bad json", "x"], "ended_with_answer": True}, "turn 1: bad json"),
        ({"turn_errors": [None], "ended_with_answer": False}, "ended without an <answer> turn"),
        ({"turn_errors": [None] * 4, "ended_with_answer": True, "max_turns": 3}, "4 turns exceed the budget of 3"),
    ],
)
def test_invalid_trajectories_say_why(kwargs, reason):
    check = trajectory_format_ok(**kwargs)
    assert check == FormatCheck(False, reason) and r_format(check) == 0.0


def test_answer_not_required():
    assert trajectory_format_ok([None], ended_with_answer=False, require_answer=False).ok


def test_bad_turn_budget():
    with pytest.raises(ValueError, match="max_turns"):
        trajectory_format_ok([None], ended_with_answer=True, max_turns=0)
