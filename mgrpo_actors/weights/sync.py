"""Keeps an agent's rollout engine at its side's newest policy version (docs/architecture.md §One training step,
step 6): announcements on `mgrpo.R.weights.<side>` are loaded as they come (between rollouts: they
wait in the actor's mailbox like any message), and a request that names a newer version than the
engine has makes the engine fetch it first, from the latest announcement kept in KV. A version that
is not announced yet is a passing failure: the request is handed back and comes again."""

from __future__ import annotations

from mgrpo_actors.engines.base import RolloutEngine
from mgrpo_actors.log import get_logger
from mgrpo_actors.phases import WEIGHTS, phase
from mgrpo_actors.runtime import Bus, BusError, is_transient
from mgrpo_actors.weights.store import WeightsStore
from protocols import WeightsVersion, decode

__all__ = ["PolicySync", "latest_key"]

log = get_logger(__name__)


def latest_key(side: str) -> str:
    """KV key (bucket `versions-<side>`) of a side's latest WeightsVersion."""
    return f"latest.{side}"


class PolicySync:
    """One engine's weights, kept current."""

    def __init__(self, bus: Bus, side: str, engine: RolloutEngine, store: WeightsStore) -> None:
        self.bus, self.side, self.engine, self.store = bus, side, engine, store
        self.versions = bus.kv(bus.subjects.bucket(f"versions-{side}"))
        self.loads = 0

    def load(self, announced: WeightsVersion) -> bool:
        """Load an announced version if it is newer than the engine's; True if loaded."""
        if announced.side != self.side or announced.version <= self.engine.policy_version:
            return False
        with phase(WEIGHTS):
            path = self.store.fetch(announced)
            try:
                self.engine.load_weights(path, announced.version)
            finally:
                self.store.release(path)
        self.loads += 1
        log.info("policy loaded", side=self.side, version=announced.version, step=announced.step)
        return True

    def ensure(self, version: int) -> None:
        """The engine has at least `version` when this returns; BusError (retry later) if nobody announced it yet."""
        if self.engine.policy_version >= version:
            return
        raw = self.versions.get(latest_key(self.side))
        latest = decode(raw) if raw is not None else None
        if not isinstance(latest, WeightsVersion) or latest.version < version:
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
