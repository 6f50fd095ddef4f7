"""Consumed work leaves the streams (docs/architecture.md §Delivery and state, consumed work goes).

A trajectory is done with once its aligner has acknowledged it (its batch is out), a batch once its learner has
(a checkpoint holds it), a reward report once the sub aligner has. Those streams are each read by one durable
(protocols/durables.py work_durables), so after every step the durable's owner notes how far the durable has
acknowledged everything (its ack floor) and removes from the stream what lies below the floor it noted
`keep_steps` steps before (nats.keep_consumed_steps): the newest steps' work stays for a look back with
`mgrpo tap --stream`, and a long run's storage stays at what those steps hold instead of growing with every step
(measured before: a tiny run added 152 KB a step, 90 MB in 600 steps). Floors only rise, so everything below an
earlier one is settled: nothing unacknowledged is ever removed, and a resumed run finds all it needs. A message its
reader dead-lettered (terminated: runtime/deadletter.py) is settled too, and goes with the rest; what stays of it
is its copy in the `dlq` stream (its first 64 KiB, for a person to read).

Why not JetStream's work-queue retention, which removes a message on its ack: it would keep nothing to look back
at, and a stream's retention cannot change once the stream is made.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["ConsumedWork", "ack_floor", "purge_below"]


async def ack_floor(js: Any, stream: str, durable: str) -> int:
    """The stream sequence up to which `durable` has acknowledged every message (JetStream's ack floor)."""
    return (await js.consumer_info(stream, durable)).ack_floor.stream_seq


async def purge_below(js: Any, stream: str, seq: int) -> int:
    """Remove every message of `stream` below sequence `seq`; returns how many went."""
    state = (await js.stream_info(stream)).state
    if not state.messages or seq <= state.first_seq:
        return 0
    await js.purge_stream(stream, seq=seq)
    return min(seq, state.last_seq + 1) - state.first_seq  # our streams delete nothing one by one: no gaps


class ConsumedWork:
    """One work durable's acknowledged messages, removed from its stream `keep_steps` steps after they were
    (keep_steps 0: at once; -1: never). Its owner calls `after_step()` once per step; `bus` is the role's Bus
    (ack_floor and purge_below of its durable)."""

    def __init__(self, bus: Any, durable: str, keep_steps: int) -> None:
        self.bus, self.durable, self.keep_steps = bus, durable, keep_steps
        self.floors: collections.deque[int] = collections.deque()  # noted after each step, oldest first

    def after_step(self) -> int:
        """Note the durable's ack floor now; remove what lay below the one noted `keep_steps` steps ago.
        Returns how many messages went."""
        if self.keep_steps < 0:
            return 0
        floor = self.bus.ack_floor(self.durable)
        if floor is None:  # not known now (said by the bus): nothing noted, nothing removed
            return 0
        self.floors.append(floor)
        if len(self.floors) <= self.keep_steps:
            return 0
        return self.bus.purge_below(self.durable, self.floors.popleft() + 1)
