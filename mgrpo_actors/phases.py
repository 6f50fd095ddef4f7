"""Where this process's time goes: named phases recorded as (kind, start, end) intervals.

    with phase(GENERATE):            # or @timed(GENERATE) on a function
        ...

Off by default, and then `phase` costs a global read and returns a shared no-op context manager.
`enable()` turns it on for the whole process (every thread; `mgrpo bench steps` does that) and keeps
the newest `max_intervals` intervals in memory (a deque: bounded, never written anywhere). Times are
wall-clock seconds (`time.time()`), the clock of the envelopes' send times, so intervals can be cut
into the steps that the run's events delimit. Phases may nest or overlap (several actor threads):
whoever reads them takes unions (mgrpo_actors/bench/step_split.py).

Kinds: model compute is `generate` (a rollout engine's batched generation, M's `reason` included)
and `learn` (a learner applying a batch: forward, backward, optimizer step); then `weights` (a
learner writing and publishing new weights, an engine fetching and loading them), `checkpoint` (a
learner's checkpoint), `align` (an aligner building a step's batch) and `score` (judging finished
rollouts: r_format, r_correct, R_M and R_S; an LLM judge's requests included).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "ALIGN",
    "CHECKPOINT",
    "COMPUTE",
    "GENERATE",
    "KINDS",
    "LEARN",
    "SCORE",
    "WEIGHTS",
    "Interval",
    "PhaseRecorder",
    "disable",
    "enable",
    "phase",
    "recorder",
    "timed",
]

GENERATE, LEARN, WEIGHTS, CHECKPOINT, ALIGN, SCORE = "generate", "learn", "weights", "checkpoint", "align", "score"
KINDS = (GENERATE, LEARN, WEIGHTS, CHECKPOINT, ALIGN, SCORE)
COMPUTE = (GENERATE, LEARN)  # model compute; everything else is bookkeeping, messaging or waiting

F = TypeVar("F", bound=Callable[..., Any])


class Interval(NamedTuple):
    kind: str
    start: float
    end: float


class PhaseRecorder:
    """The newest `max_intervals` intervals of this process; thread-safe."""

    def __init__(self, max_intervals: int = 100_000) -> None:
        self._intervals: deque[Interval] = deque(maxlen=max_intervals)
        self._lock = threading.Lock()
        self.dropped = 0  # intervals pushed out by newer ones

    def add(self, kind: str, start: float, end: float) -> None:
        with self._lock:
            if len(self._intervals) == self._intervals.maxlen:
                self.dropped += 1
            self._intervals.append(Interval(kind, start, end))

    def intervals(self) -> list[Interval]:
        with self._lock:
            return list(self._intervals)

    def clear(self) -> None:
        with self._lock:
            self._intervals.clear()
            self.dropped = 0


class _Phase:
    __slots__ = ("kind", "rec", "start")

    def __init__(self, rec: PhaseRecorder, kind: str) -> None:
        self.rec, self.kind = rec, kind

    def __enter__(self) -> None:
        self.start = time.time()

    def __exit__(self, *exc: object) -> None:
        self.rec.add(self.kind, self.start, time.time())  # a phase that raised still took its time


_NOOP = nullcontext()
_recorder: PhaseRecorder | None = None


def enable(max_intervals: int = 100_000) -> PhaseRecorder:
    """Start recording (a fresh recorder) and return it."""
    global _recorder
    _recorder = PhaseRecorder(max_intervals)
    return _recorder


def disable() -> None:
    global _recorder
    _recorder = None


def recorder() -> PhaseRecorder | None:
    """The recorder while recording is on, else None."""
    return _recorder


def phase(kind: str) -> Any:
    """A context manager that records its block as a `kind` interval while recording is on."""
    rec = _recorder
    return _NOOP if rec is None else _Phase(rec, kind)


def timed(kind: str) -> Callable[[F], F]:
    """Decorator: every call of the function is a `kind` phase."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            with phase(kind):
                return fn(*args, **kwargs)

        return timed_call  # type: ignore[return-value]

    return wrap
