"""Writes after a learner's optimizer step (docs/architecture.md §Delivery and state): the weights, their
version, the learner's record and its StepDone. The step cannot be redone in the learner's process, so a
passing bus failure is waited out here instead of ending the learner (actors/learner.py calls it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from mgrpo_actors.runtime import is_transient

__all__ = ["AFTER_STEP_ATTEMPTS", "AFTER_STEP_PAUSE_S", "write_after_step"]

T = TypeVar("T")
# Writes after the optimizer step are tried this often, this far apart (a leader election takes seconds).
AFTER_STEP_ATTEMPTS = 12
AFTER_STEP_PAUSE_S = 5.0


def write_after_step(
    write: Callable[[], T],
    what: str,
    log: Any,
    attempts: int = AFTER_STEP_ATTEMPTS,
    pause_s: float = AFTER_STEP_PAUSE_S,
) -> T:
    """A write after the optimizer step, which the learner's process may not redo: a passing bus failure
    (a NATS server lost, a stream electing its leader) is waited out here, up to `attempts` tries,
    rather than ending the learner (each write is idempotent: the same object, key and id again). A
    failure that is not the bus's, or the last one, is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except Exception as exc:
            if not is_transient(exc) or attempt == attempts:
                raise
            log.warning(
                "write after the step failed; trying again",
                what=what,
                attempt=attempt,
                of=attempts,
                error=f"{type(exc).__name__}: {exc}",
            )
            time.sleep(pause_s)
    raise AssertionError("unreachable")
