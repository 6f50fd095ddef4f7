"""From the weights an engine holds to an announced version (docs/architecture.md §Weights: full snapshots
and deltas): the announced file, and while it is a delta against anything other than what is held, the
file of its base, found by name, back to a full snapshot if need be. Each file is
checked against the digest that names it: the announced one for the newest, each delta's `base_sha256`
for the one before, so the chain that is applied is exactly the learner's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import load_file

from mgrpo_actors.weights.delta import WeightsDelta, apply_delta
from mgrpo_actors.weights.wire import read_delta, read_header
from protocols import WeightsVersion

__all__ = ["Held", "Link", "fetch_chain", "rebuild"]

Held = tuple[int, str]  # (version, sha256 of its file) of weights loaded from the chain


class VersionFiles(Protocol):
    """What the chain needs of a WeightsStore."""

    def fetch_version(self, announced: WeightsVersion, version: int, sha256: str) -> Path: ...

    def release(self, path: Path) -> None: ...


@dataclass(frozen=True)
class Link:
    """One version to load: a full snapshot's file (`path`), or a delta (read; its file let go)."""

    version: int
    sha256: str
    path: Path | None
    delta: WeightsDelta | None


def fetch_chain(store: VersionFiles, announced: WeightsVersion, held: Held | None) -> list[Link]:
    """The versions that take weights `held` (None: none of the chain's) to `announced`, oldest first: a full
    snapshot then deltas, or only deltas when the oldest one's base is `held`. FileNotFoundError if a file is
    gone (a newer full snapshot let it go), ValueError if one is not what named it."""
    links: list[Link] = []
    version, sha256, base = announced.version, announced.sha256, announced.base
    try:
        while True:
            path = store.fetch_version(announced, version, sha256)
            header = read_header(path)
            if header.version not in (version, None) or (version == announced.version and header.base != base):
                store.release(path)
                raise ValueError(
                    f"weights file of version {version} is version {header.version} (base {header.base}), "
                    f"not what its announcement says (base {base})"
                )
            if header.kind == "full":
                links.append(Link(version, sha256, path, None))
                break
            delta = read_delta(path, header)
            store.release(path)
            links.append(Link(version, sha256, None, delta))
            if held is not None and held == (delta.base, delta.base_sha256):
                break
            version, sha256 = delta.base, delta.base_sha256  # base < version (read_header): the walk ends
    except BaseException:
        for link in links:
            if link.path is not None:
                store.release(link.path)
        raise
    return links[::-1]


def rebuild(store: VersionFiles, announced: WeightsVersion) -> dict[str, torch.Tensor]:
    """The whole weights of an announced version, as the learner wrote them (its wire dtype): its full
    snapshot with the deltas after it applied."""
    state: dict[str, torch.Tensor] = {}
    for link in fetch_chain(store, announced, None):
        if link.path is not None:
            state = load_file(str(link.path))
            store.release(link.path)
        else:
            assert link.delta is not None
            apply_delta(state, link.delta)
    return state
