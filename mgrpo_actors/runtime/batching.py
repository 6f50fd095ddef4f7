"""`PendingBatch`: work that arrives while an actor is busy waits and goes into its next batch.

An actor handles one message at a time; requests that reach its mailbox while it runs a batch (a
rollout on an engine) queue behind it. Instead of one generate call per request, the actor adds each
request here and tells itself one `RunBatch` note; by the time the note is handled, every request that
arrived before it is waiting, and `take()` hands them over together (at most `max_size`; the rest get
a note of their own).
"""

from __future__ import annotations

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

    def __init__(self, actor: Target, max_size: int) -> None:
        self._actor = actor
        self._max_size = max_size
        self._items: list[T] = []
        self._scheduled = False

    def add(self, item: T) -> None:
        self._items.append(item)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            tell(self._actor, RunBatch())

    def take(self) -> list[T]:
        """The next batch (on a RunBatch note); what does not fit is scheduled again."""
        self._scheduled = False
        batch, self._items = self._items[: self._max_size], self._items[self._max_size :]
        if self._items:
            self._schedule()
        return batch
