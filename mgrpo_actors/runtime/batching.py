"""`PendingBatch`: work that arrives while an actor is busy waits and goes into its next batch.

An actor handles one message at a time; requests that reach its mailbox while it runs a batch (a
rollout on an engine) queue behind it. Instead of one generate call per request, the actor adds each
request here and tells itself one `RunBatch` note; by the time the note is handled, every request that
arrived before it is waiting, and `take()` hands them over together (at most `max_size`; the rest get
a note of their own).

Requests of one step come a few milliseconds apart (the controller publishes B of them, M sends a
rollout's subtasks together), and a consumer hands each on the moment it arrives; an idle actor would
start its batch with the first one alone and run the others after it. With `gather_s` > 0 the note is
told that long after the first request of a batch (at once when the batch is full), so they generate
together.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Generic, TypeVar

from mgrpo_actors.runtime.targets import Target, tell

__all__ = ["PendingBatch", "RunBatch"]

T = TypeVar("T")


@dataclass(frozen=True)
class RunBatch:
    """An actor's note to itself: run what has queued up."""


class PendingBatch(Generic[T]):
    """Items waiting for the actor's next batch (used from the actor's own thread only)."""

    def __init__(self, actor: Target, max_size: int, gather_s: float = 0.0) -> None:
        self._actor = actor
        self._max_size = max_size
        self._gather_s = gather_s
        self._items: list[T] = []
        self._scheduled = False
        self._told_full = False  # a note told early because the batch filled up

    def add(self, item: T) -> None:
        self._items.append(item)
        full = len(self._items) >= self._max_size
        if not self._scheduled:
            self._schedule(wait=not full)
        elif full and self._gather_s > 0 and not self._told_full:
            self._told_full = True
            tell(self._actor, RunBatch())  # full: no reason to wait for the gather timer

    def _schedule(self, wait: bool = False) -> None:
        if self._scheduled:
            return
        self._scheduled = True
        if wait and self._gather_s > 0:
            timer = threading.Timer(self._gather_s, tell, (self._actor, RunBatch()))
            timer.daemon = True
            timer.start()
        else:
            tell(self._actor, RunBatch())

    def take(self) -> list[T]:
        """The next batch (on a RunBatch note; empty if an earlier note took it); what does not fit is
        scheduled again, at once."""
        self._scheduled = False
        self._told_full = False
        batch, self._items = self._items[: self._max_size], self._items[self._max_size :]
        if self._items:
            self._schedule()
        return batch
