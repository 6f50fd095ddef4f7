"""A step's wall time split by what the process was doing (`mgrpo bench steps`): pure interval arithmetic
over the phases mgrpo_actors/phases.py recorded.

Actors run concurrently, so phases overlap (both learners at once, a main agent's generation while a
sub-agent generates). Each instant of a step's window [start, end) is therefore counted once, under
the first of these categories that covers it: generate, learn (model compute), weights, checkpoint,
align, score; an instant that none covers is `other`: messaging, serialisation, JetStream and KV round trips,
the agents' and tools' own Python work, and waiting. So the categories add up to the step's wall
time, and generate + learn is exactly the union of the model-compute intervals. A phase that straddles
the window's edge counts only for its part inside.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mgrpo_actors.phases import COMPUTE, KINDS, Interval

__all__ = ["CATEGORIES", "OTHER", "StepSplit", "clip", "mean_split", "span_length", "split_step", "subtract", "union"]

OTHER = "other"
CATEGORIES = (*KINDS, OTHER)  # in the order instants are attributed; OTHER takes what is left

Span = tuple[float, float]


def union(spans: Iterable[Span]) -> list[Span]:
    """Sorted, disjoint spans covering the same instants (empty spans dropped)."""
    merged: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def clip(spans: Iterable[Span], lo: float, hi: float) -> list[Span]:
    """The parts of `spans` inside [lo, hi)."""
    return [(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)]


def subtract(spans: Sequence[Span], minus: Sequence[Span]) -> list[Span]:
    """The instants of `spans` not in `minus` (both sorted and disjoint, as `union` returns them)."""
    out: list[Span] = []
    j = 0
    for start, end in spans:
        while j < len(minus) and minus[j][1] <= start:
            j += 1
        cursor, k = start, j
        while k < len(minus) and minus[k][0] < end:
            if minus[k][0] > cursor:
                out.append((cursor, minus[k][0]))
            cursor = max(cursor, minus[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def span_length(spans: Iterable[Span]) -> float:
    return sum(e - s for s, e in spans)


@dataclass(frozen=True)
class StepSplit:
    """One step's wall seconds by category (`seconds` adds up to `wall`)."""

    step: int
    wall: float
    seconds: dict[str, float]  # category -> seconds counted under it (CATEGORIES, exclusive)
    busy: dict[str, float]  # kind -> seconds its own phases covered (the union of that kind alone; kinds may overlap)

    @property
    def compute(self) -> float:
        """Seconds of model compute: the union of every generate and learn interval in the step."""
        return sum(self.seconds[kind] for kind in COMPUTE)

    @property
    def non_compute_share(self) -> float:
        """The share of the step that is not model compute (messaging, serialisation, bookkeeping, waiting)."""
        return 1.0 - self.compute / self.wall if self.wall > 0 else 0.0


def split_step(step: int, start: float, end: float, intervals: Iterable[Interval]) -> StepSplit:
    """Split the window [start, end) of `step` over the categories."""
    by_kind: dict[str, list[Span]] = {kind: [] for kind in KINDS}
    for interval in intervals:
        if interval.kind in by_kind:
            by_kind[interval.kind].append((interval.start, interval.end))
    covered: list[Span] = []
    seconds: dict[str, float] = {}
    busy: dict[str, float] = {}
    for kind in KINDS:
        spans = union(clip(by_kind[kind], start, end))
        busy[kind] = span_length(spans)
        seconds[kind] = span_length(subtract(spans, covered))
        covered = union([*covered, *spans])
    wall = max(0.0, end - start)
    seconds[OTHER] = max(0.0, wall - span_length(covered))
    return StepSplit(step, wall, seconds, busy)


def mean_split(splits: Sequence[StepSplit]) -> StepSplit | None:
    """The mean step of `splits` (step -1); None for none. Its share is that of the mean step."""
    if not splits:
        return None
    n = len(splits)
    return StepSplit(
        step=-1,
        wall=sum(s.wall for s in splits) / n,
        seconds={c: sum(s.seconds[c] for s in splits) / n for c in CATEGORIES},
        busy={k: sum(s.busy[k] for s in splits) / n for k in KINDS},
    )
