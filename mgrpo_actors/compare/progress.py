"""`mgrpo compare`'s progress over its whole plan, kept in `<out>/progress.json` so an interrupted comparison
resumes where it stopped, and a changed one redoes only what changed.

A step (a warm-up, a run or an evaluation: one `mgrpo` process) is recorded once it exited 0 and wrote its
outputs, with a random id and under a key: the sha256 of its command line (with the `--config` file's
settings, not its path or comments) and of the ids of the records of the steps it builds on. A later invocation reuses a
recorded step only when both hold:

- its key is the same: the same command (a changed `--set`, model, budget, seed or config file is another
  step) from the same results of what it builds on (a redone stage-1 start has a new id, so every run and
  evaluation from it is redone, in this invocation or any later one: their command lines name the same
  directories, whose contents changed);
- its outputs are all still there (its warm-up, `summary.json` and exports, or report).

A step about to run loses its record first, so one cut off part-way (a warm-up saves its models one by one)
never counts as done. Anything else runs again from its start (a fresh `mgrpo run` clears its own run
directory). So `--seeds 0,1` after `--seeds 0` runs only seed 1's steps; more `--eval-questions` redoes the
evaluations, not the runs.

Before each step the comparison says where it is ("[5/14] run-m-grpo-seed0") and, once a step has finished,
how long the rest should take: each step left at the mean seconds of the finished steps of its kind (warmup,
stage1, run, eval), or of all finished steps where none of its kind has finished yet, over the steps that run at
once. It also keeps the wall-clock time spent on the plan across the invocations that resumed it.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from mgrpo_actors.runtime.disk import atomic_write_text

__all__ = ["PROGRESS_FILE", "PlanProgress", "duration", "step_kind", "step_key"]

PROGRESS_FILE = "progress.json"


def step_kind(name: str) -> str:
    """A step's kind, the start of its name: "run-m-grpo-seed0" -> "run", "eval-start-multi" -> "eval"."""
    return name.split("-", 1)[0]


def step_key(command: Sequence[str], config_sha256: str, inputs: Sequence[str] = ()) -> str:
    """What identifies a step: its command line, the content of the config file it reads and the record ids
    of the steps whose results it reads (`inputs`)."""
    return hashlib.sha256(json.dumps([list(command), config_sha256, list(inputs)]).encode()).hexdigest()


def duration(seconds: float) -> str:
    """ "42 s", "12 min", "1 h 05 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _read(path: Path) -> dict:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _wall_before(path: Path) -> float:
    """The wall-clock seconds the invocations before this one spent on the plan (progress.json's)."""
    seconds = _read(path).get("wall_seconds", 0.0)
    return float(seconds) if isinstance(seconds, (int, float)) else 0.0


def _records(path: Path) -> dict[str, dict]:
    """The recorded steps of progress.json; nothing from a file that is unreadable or of another layout."""
    done = _read(path).get("done", {})
    if not isinstance(done, dict):
        return {}
    return {
        name: record
        for name, record in done.items()
        if isinstance(record, dict)
        and isinstance(record.get("key"), str)
        and isinstance(record.get("id"), str)
        and isinstance(record.get("seconds"), float)
    }


class PlanProgress:
    """The steps of one comparison in order, which of them are done (and took how long), and the time left."""

    def __init__(
        self, out: Path, steps: Sequence[str], clock: Callable[[], float] = time.monotonic, parallel: int = 1
    ) -> None:
        if len(set(steps)) != len(steps):
            raise ValueError(f"a plan's step names must be unique, got {list(steps)}")
        self.path, self.steps, self.clock = out / PROGRESS_FILE, list(steps), clock
        self.parallel = parallel  # steps that run at once: the estimate of what is left divides by it
        self.records = _records(self.path)  # every step recorded, this plan's or not: {name: {key, id, seconds}}
        self.started, self.wall_before = clock(), _wall_before(self.path)

    @property
    def wall_seconds(self) -> float:
        """Wall-clock seconds spent on the plan: this invocation's so far and those of the invocations it resumed
        (as of their last record)."""
        return self.wall_before + self.clock() - self.started

    @property
    def done(self) -> dict[str, float]:
        """This plan's steps recorded as finished (whether still reusable or not) -> their seconds."""
        return {name: self.records[name]["seconds"] for name in self.steps if name in self.records}

    def key(self, command: Sequence[str], config_sha256: str, after: Iterable[str] = ()) -> str:
        """The key of a step running `command` on the results of the steps `after` (as recorded now)."""
        return step_key(command, config_sha256, [self.records[n]["id"] if n in self.records else "" for n in after])

    def reusable(self, name: str, key: str, outputs: Iterable[Path]) -> bool:
        """Whether step `name` finished before under `key` and its `outputs` are all there."""
        record = self.records.get(name)
        return record is not None and record["key"] == key and all(path.exists() for path in outputs)

    def forget(self, name: str) -> None:
        """Step `name` is about to run: no longer done until it finishes (its outputs are being replaced)."""
        if self.records.pop(name, None) is not None:
            self._write()

    def record(self, name: str, key: str, seconds: float) -> None:
        """Step `name` ran and exited 0 after `seconds`: written to progress.json at once (whole or not at all)."""
        self.records[name] = {"key": key, "id": uuid.uuid4().hex, "seconds": float(seconds)}
        self._write()

    def _write(self) -> None:
        document = {"done": self.records, "wall_seconds": self.wall_seconds}
        atomic_write_text(self.path, json.dumps(document, indent=2) + "\n", "the comparison's progress")

    def seconds_left(self, after: str) -> float | None:
        """Estimated seconds of the steps not yet done besides `after` (each at the mean of the finished steps of
        its kind), over the steps that run at once; None while a kind of step left has none finished. Kinds cost
        too differently to stand in for each other: a warm-up built takes most of an hour, an evaluation minutes (the
        first plan of make compare read 9 hours from its warm-up alone). Within a kind the mean can still mislead: a
        warm-up reused takes a second."""
        by_kind: dict[str, list[float]] = {}
        for name, seconds in self.done.items():
            by_kind.setdefault(step_kind(name), []).append(seconds)
        rest = [name for name in self.steps if name != after and name not in self.done]
        if any(step_kind(name) not in by_kind for name in rest):
            return None
        at_once = max(1, min(self.parallel, len(rest)))  # a rough share: not every step left can run beside others
        return sum(sum(by_kind[k]) / len(by_kind[k]) for k in map(step_kind, rest)) / at_once

    def where(self, name: str) -> str:
        """ "[5/14] run-m-grpo-seed0" with how many are done, time elapsed and the estimate of what is left."""
        position = f"[{self.steps.index(name) + 1}/{len(self.steps)}] {name}"
        elapsed = duration(self.clock() - self.started)
        left = self.seconds_left(name)
        if left is not None:
            estimate = f", about {duration(left)} after this one"
        else:  # said once something has finished: before that, nothing could be timed
            estimate = ", time left known once a step of each kind has finished" if self.done else ""
        return f"{position} ({len(self.done)} of {len(self.steps)} done, {elapsed} elapsed{estimate})"
