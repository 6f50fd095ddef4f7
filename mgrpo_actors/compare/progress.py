"""`mgrpo compare`'s progress over its whole plan, kept in `<out>/progress.json` so an interrupted comparison
resumes where it stopped: a step (a warm-up, a run or an evaluation: one `mgrpo` process) counts as done once
it exited 0 and was recorded, and only while what it wrote is still there. Re-running the same command into
the same `--out` redoes nothing finished; a step cut off part-way runs again from its start (a fresh `mgrpo
run` clears its own run directory). The file also holds the plan's identity (the comparison's settings): a
plan with other settings into the same `--out` starts over (nothing of the old plan counts as done; a finished
`--warmup` is still reused, as the comparison always did) rather than mixing the two plans' results.

Before each step the comparison says where it is ("[5/14] run-m-grpo") and, once a step of any kind has
finished, how long the rest should take: each step left at the mean seconds of the finished steps of its kind
(warmup, stage1, run, eval), or of all finished steps where none of its kind has finished yet.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mgrpo_actors.runtime.disk import atomic_write_text

__all__ = ["PROGRESS_FILE", "PlanProgress", "duration", "step_kind"]

PROGRESS_FILE = "progress.json"


def step_kind(name: str) -> str:
    """A step's kind, the start of its name: "run-m-grpo" -> "run", "eval-start-multi" -> "eval"."""
    return name.split("-", 1)[0]


def duration(seconds: float) -> str:
    """ "42 s", "12 min", "1 h 05 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class PlanProgress:
    """The steps of one comparison in order, which of them are done (and took how long), and the time left."""

    def __init__(
        self, out: Path, identity: dict[str, Any], steps: Sequence[str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        if len(set(steps)) != len(steps):
            raise ValueError(f"a plan's step names must be unique, got {list(steps)}")
        self.path, self.identity, self.steps, self.clock = out / PROGRESS_FILE, identity, list(steps), clock
        self.done: dict[str, float] = {}  # step -> seconds it took
        self.started = clock()
        self.other_plan = False  # progress.json was another plan's: this one starts over
        if self.path.is_file():
            try:
                recorded = json.loads(self.path.read_text())
            except (OSError, ValueError):
                recorded = {}  # unreadable: nothing counts as done (each write is atomic, so this is not ours)
            self.other_plan = recorded.get("identity") != identity
            if not self.other_plan:
                done = recorded.get("done", {})
                self.done = {name: float(s) for name, s in done.items() if name in self.steps}

    def is_done(self, name: str, output: Path) -> bool:
        """Whether step `name` finished in this or an earlier invocation and its `output` is still there."""
        return name in self.done and output.exists()

    def record(self, name: str, seconds: float) -> None:
        """Step `name` exited 0 after `seconds`: written to progress.json at once (whole or not at all)."""
        self.done[name] = seconds
        document = {"identity": self.identity, "done": self.done}
        atomic_write_text(self.path, json.dumps(document, indent=2) + "\n", "the comparison's progress")

    def seconds_left(self, after: str) -> float | None:
        """Estimated seconds of the steps after `after` not yet done; None before any step finished."""
        if not self.done:
            return None
        by_kind: dict[str, list[float]] = {}
        for name, seconds in self.done.items():
            by_kind.setdefault(step_kind(name), []).append(seconds)
        overall = sum(self.done.values()) / len(self.done)
        rest = self.steps[self.steps.index(after) + 1 :]
        return sum(
            (sum(by_kind[k]) / len(by_kind[k])) if (k := step_kind(name)) in by_kind else overall
            for name in rest
            if name not in self.done
        )

    def where(self, name: str) -> str:
        """ "[5/14] run-m-grpo" with how many are done, time elapsed and the estimate of what is left."""
        position = f"[{self.steps.index(name) + 1}/{len(self.steps)}] {name}"
        elapsed = duration(self.clock() - self.started)
        left = self.seconds_left(name)
        estimate = "" if left is None else f", about {duration(left)} after this one"
        return f"{position} ({len(self.done)} of {len(self.steps)} done, {elapsed} elapsed{estimate})"
