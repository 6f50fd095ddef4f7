"""Keeps an agent's rollout engine at its side's newest policy version (docs/architecture.md §One training step,
step 6): announcements on `mgrpo.R.weights.<side>` are loaded as they come (between rollouts: they
wait in the actor's mailbox like any message), and a request that names a newer version than the
engine has makes the engine fetch it first, from the latest announcement kept in KV. A version that
is not announced yet is a passing failure: the request is handed back and comes again.

A delta is loaded only onto the exact weights it was made against (its base version's file digest);
an engine that missed a version, or holds weights of another chain (a learner restarted), fetches
what leads there from what it holds, back to the newest full snapshot if need be (weights/chain.py),
so it ends bit-identical to the learner's wire weights. An engine without `loads_deltas` (vLLM, a custom
one) is given the changed tensors whole, from a copy of the wire weights kept here."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from mgrpo_actors.engines.base import RolloutEngine
from mgrpo_actors.log import get_logger
from mgrpo_actors.phases import WEIGHTS, phase
from mgrpo_actors.runtime import Bus, BusError, is_transient
from mgrpo_actors.weights.chain import Held, Link, fetch_chain
from mgrpo_actors.weights.delta import apply_delta
from mgrpo_actors.weights.store import WeightsStore
from protocols import WeightsVersion, decode

__all__ = ["CHAIN_ATTEMPTS", "PolicySync", "latest_key"]

log = get_logger(__name__)

# A chain whose file went away while it was read (a newer full snapshot let it go) is read again from the
# newest announcement, this often.
CHAIN_ATTEMPTS = 3


def latest_key(side: str) -> str:
    """KV key (bucket `versions-<side>`) of a side's latest WeightsVersion."""
    return f"latest.{side}"


class PolicySync:
    """One engine's weights, kept current."""

    def __init__(self, bus: Bus, side: str, engine: RolloutEngine, store: WeightsStore) -> None:
        self.bus, self.side, self.engine, self.store = bus, side, engine, store
        self.versions = bus.kv(bus.subjects.bucket(f"versions-{side}"))
        self.loads = 0
        self.held: Held | None = None  # the version (and its file's sha256) the engine holds, once loaded here
        self.deltas = bool(getattr(engine, "loads_deltas", False))
        self.mirror: dict[str, torch.Tensor] | None = None  # without `deltas`: the wire weights held

    def _latest(self) -> WeightsVersion | None:
        raw = self.versions.get(latest_key(self.side))
        latest = decode(raw) if raw is not None else None
        return latest if isinstance(latest, WeightsVersion) else None

    def _is_news(self, announced: WeightsVersion) -> bool:
        """Newer than what the engine holds, or the same version made again (a learner restarted before
        recording it) as another file."""
        held = self.engine.policy_version
        if announced.side != self.side or announced.version < held:
            return False
        return announced.version > held or (bool(announced.sha256) and self.held != (held, announced.sha256))

    def load(self, announced: WeightsVersion) -> bool:
        """Load an announced version if it is news to the engine; True if loaded."""
        if not self._is_news(announced):
            return False
        with phase(WEIGHTS):
            for link in self._chain(announced):
                self._load_link(link)
        self.loads += 1
        log.info("policy loaded", side=self.side, version=announced.version, step=announced.step)
        return True

    def _chain(self, announced: WeightsVersion) -> list[Link]:
        for attempt in range(1, CHAIN_ATTEMPTS + 1):
            try:
                return fetch_chain(self.store, announced, self.held)
            except FileNotFoundError:
                newest = self._latest()
                if attempt == CHAIN_ATTEMPTS or newest is None or newest.version <= announced.version:
                    raise
                log.info("weights let go while read; from the newest", side=self.side, version=newest.version)
                announced = newest
        raise AssertionError("unreachable")

    def _load_link(self, link: Link) -> None:
        held, self.held = self.held, None  # an engine that failed to load holds nothing known
        if link.path is not None:
            path = link.path
            try:
                if not self.deltas:
                    self.mirror = load_file(str(path))
                self.engine.load_weights(path, link.version)
            finally:
                self.store.release(path)
        else:
            delta = link.delta
            assert delta is not None and held == (delta.base, delta.base_sha256)
            if self.deltas:
                self.engine.load_weights(delta, link.version)
            else:
                assert self.mirror is not None
                apply_delta(self.mirror, delta)
                changed = {name: self.mirror[name] for name in delta.shapes()}
                self.engine.load_weights(changed, link.version)
        self.held = (link.version, link.sha256)

    def ensure(self, version: int) -> None:
        """The engine has at least `version` when this returns; BusError (retry later) if nobody announced it yet."""
        if self.engine.policy_version >= version:
            return
        latest = self._latest()
        if latest is None or latest.version < version:
            raise BusError(f"{self.side} policy version {version} is not announced yet")
        try:
            self.load(latest)
        except (
            Exception
        ) as exc:  # the bus failing meanwhile (a NATS server lost): hand the requests back, do not end the agent
            if is_transient(exc):
                raise BusError(
                    f"{self.side} policy version {latest.version} could not be fetched yet: {type(exc).__name__}: {exc}"
                ) from exc
            raise
