"""The learner's side of weight sync: each new policy version written as a full snapshot or as a delta against
the version before it (docs/architecture.md §Weights: full snapshots and deltas)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from mgrpo_actors.phases import WEIGHTS, timed
from mgrpo_actors.weights.advance import advance_all
from mgrpo_actors.weights.delta import SparseChange
from mgrpo_actors.weights.wire import delta_entries, write_version

__all__ = ["WeightsEncoder", "WrittenVersion"]


@dataclass(frozen=True)
class WrittenVersion:
    """One version's file, as written."""

    path: Path
    version: int
    base: int | None  # the version it is a delta against; None: a full snapshot
    sha256: str
    nbytes: int  # the file's size
    elements: int  # elements of the model's weights
    changed: int  # of them changed since the version before (a full snapshot: all)
    tensors: int  # tensors in the file (a delta: those that changed)


class WeightsEncoder:
    """Keeps the weights of the version it wrote last, in the wire dtype (what the engines hold once they
    loaded it; brought to each next version in place), and writes each next version as a delta against them,
    or as a full snapshot: the first version this process writes (a learner started, restarted or resumed
    knows nothing of what the engines hold), every `full_every`-th after that, and the one after a write that
    failed."""

    def __init__(self, dtype: torch.dtype, full_every: int, skip: Collection[str] = ()) -> None:
        """dtype: the wire dtype (delta.wire_dtype); skip: names left out (tied aliases: the engines allow that)."""
        if full_every < 1:
            raise ValueError(f"full_every must be >= 1, got {full_every}")
        self.dtype, self.full_every, self.skip = dtype, full_every, frozenset(skip)
        self.last: dict[str, torch.Tensor] = {}  # the wire weights of the version written last
        self.previous: tuple[int, str] | None = None  # (version, sha256 of its file) written last
        self.since_full = 0  # versions written since the last full snapshot

    def next_is_full(self, version: int) -> bool:
        previous = self.previous
        return previous is None or previous[0] != version - 1 or self.since_full + 1 >= self.full_every

    @timed(WEIGHTS)
    def write(self, state: Mapping[str, torch.Tensor], version: int, path: Path) -> WrittenVersion:
        """Write `state` (the model's full state dict, any dtype or device) as version `version` at `path`."""
        full = self.next_is_full(version)
        previous, self.previous = self.previous, None  # a write that fails part-way makes the next one full
        entries: list[tuple[str, torch.Tensor]] = []
        shapes: dict[str, list[int]] = {}
        elements = changed = tensors = 0
        names = [name for name in state if name not in self.skip]
        changes: dict[str, torch.Tensor | SparseChange | None] = {}
        pending: list[str] = []  # tensors held from the version before, to advance to this one
        for name in names:
            tensor, held = state[name].detach(), self.last.get(name)
            if held is None or held.shape != tensor.shape:  # nothing of its to compare with: whole
                changes[name] = self.last[name] = tensor.to(device="cpu", dtype=self.dtype, copy=True)
            elif full:
                changes[name] = held.copy_(tensor)  # in place: no fresh memory to fault in every version
            else:
                pending.append(name)
        advanced = advance_all([(self.last[name], state[name]) for name in pending])
        changes.update(zip(pending, advanced, strict=True))
        for name in names:
            elements += state[name].numel()
            change = changes[name]
            if change is None:
                continue
            tensors += 1
            if isinstance(change, SparseChange):
                entries += delta_entries(name, change)
                shapes[name] = list(change.shape)
                changed += change.indices.numel()
            else:
                entries.append((name, change))
                changed += change.numel()
        metadata = {"mgrpo.kind": "full" if full else "delta", "mgrpo.version": str(version)}
        if not full:
            assert previous is not None
            metadata |= {"mgrpo.base": str(previous[0]), "mgrpo.base_sha256": previous[1]}
            metadata["mgrpo.shapes"] = json.dumps(shapes, separators=(",", ":"))
        sha256, size = write_version(path, entries, metadata)
        self.previous = (version, sha256)
        self.since_full = 0 if full else self.since_full + 1
        base = None if full else version - 1
        return WrittenVersion(path, version, base, sha256, size, elements, changed, tensors)
