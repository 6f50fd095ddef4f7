"""Trajectory-level format check: r_format for R_M and R_S, docs/method.md §Rewards and §The system being trained.

Parsing one turn (optional <think>, then exactly one <tool_call>{json}</tool_call> or <answer>…</answer>)
belongs to the agents: `mgrpo_actors/agents/turn_format.py` reports, per turn, None for a valid turn
or a string saying what is wrong. This module turns those per-turn results into the one bit the
reward needs, with a reason a person can read in the logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class FormatCheck(NamedTuple):
    """Whether a whole trajectory is well formed; unpacks as `(ok, reason)`."""

    ok: bool
    # None when ok, otherwise what made the trajectory invalid.
    reason: str | None


def trajectory_format_ok(
    turn_errors: Sequence[str | None],
    ended_with_answer: bool,
    require_answer: bool = True,
    max_turns: int | None = None,
) -> FormatCheck:
    """A trajectory is valid when it has turns, every turn parsed, it fits the turn budget and,
    if required, it ended with an <answer> turn (M must answer; docs/method.md §The system being trained).

    The first problem found is reported, in that order.
    """
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns must be >= 1 or None, got {max_turns!r}")
    if len(turn_errors) == 0:
        return FormatCheck(False, "no turns")
    for index, error in enumerate(turn_errors):
        if error is not None:
            return FormatCheck(False, f"turn {index}: {error}")
    if max_turns is not None and len(turn_errors) > max_turns:
        return FormatCheck(False, f"{len(turn_errors)} turns exceed the budget of {max_turns}")
    if require_answer and not ended_with_answer:
        return FormatCheck(False, "ended without an <answer> turn")
    return FormatCheck(True, None)


def r_format(check: FormatCheck) -> float:
    """r_format ∈ {0, 1} (docs/method.md §Rewards)."""
    return 1.0 if check.ok else 0.0
