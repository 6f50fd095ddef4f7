"""The KV records of the steps an aligner published (`aligned.<side>.recent` in `state-<side>`): what a restarted
aligner learns from of what is already out (alignment/holding.py), and what commits a step (actors/aligner.py).

The newest RECENT_RECORDS steps' records live under one key, so the bucket holds one entry for them however long
the run; one key per step (`aligned.<side>.<step>`, as runs before kept them, still read) grew it by an entry a
step for ever. Older steps cannot come back: their plans and pieces were acknowledged, only unacknowledged ones
are redelivered, and those belong to the few steps in flight (pipeline.max_staleness bounds them).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

__all__ = ["FORGOTTEN", "RECENT_RECORDS", "PublishedRecords"]

RECENT_RECORDS = 64
# What a step published too long ago to keep its record reads as (no batch to announce again).
FORGOTTEN: dict[str, Any] = {"batch_id": "", "num_samples": 0, "num_chunks": 0, "forgotten": True}


class Kv(Protocol):
    """What the records need of a KV bucket (runtime/kv.py KvBucket)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> Any: ...


class PublishedRecords:
    """One side's published-step records in `kv`; `keep` newest kept (RECENT_RECORDS)."""

    def __init__(self, kv: Kv, side: str, keep: int = RECENT_RECORDS) -> None:
        self.kv, self.side, self.keep = kv, side, keep
        self.key = f"aligned.{side}.recent"
        saved = kv.get(self.key)
        self.recent: dict[int, dict[str, Any]] = {int(k): v for k, v in json.loads(saved).items()} if saved else {}
        # Steps whose per-step key was read and found absent. Nothing writes those keys any more, so absent stays
        # absent: each step's is read once, not for every piece of it (a KV round trip each, about 1.5 ms of
        # every trajectory an aligner took: docs/benchmarks.md §`steps`: where a step's time goes).
        self.unsaved: set[int] = set()

    def get(self, step: int) -> bytes | None:
        """The record of `step` as raw JSON, None if it was never published. A step older than a full window's
        oldest was published long ago (steps are published in order, a few at most in flight): a piece of it that
        still comes (a rollout stuck for that long) is late, never the start of a step to hold, whose unacked
        delivery would stop the stream's consumed work from going; it gets FORGOTTEN, its record not kept."""
        if step in self.recent:
            return json.dumps(self.recent[step]).encode()
        saved = None
        if step not in self.unsaved:
            saved = self.kv.get(f"aligned.{self.side}.{step}")  # a run that recorded one key per step
            if saved is None:
                self.unsaved.add(step)
                if len(self.unsaved) > 4 * self.keep:  # bounded: the oldest steps are long out of flight
                    self.unsaved.remove(min(self.unsaved))
        if saved is None and len(self.recent) >= self.keep and step < min(self.recent):
            return json.dumps(FORGOTTEN).encode()
        return saved

    def put(self, step: int, record: dict[str, Any]) -> None:
        """Commit `step` as published with `record` (one KV put: the whole window). Only once the put went through
        does this aligner take the step as published: a failed put leaves the step to publish again."""
        recent = {**self.recent, step: record}
        for old in sorted(recent)[: -self.keep]:
            del recent[old]
        self.kv.put(self.key, json.dumps({str(k): v for k, v in recent.items()}).encode())
        self.recent = recent
