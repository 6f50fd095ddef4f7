"""New policy versions from a learner to its side's rollout engines (docs/architecture.md §One training step,
step 6; §Delivery and state: "Weights travel by a shared directory or the NATS object store").

The learner writes each version once as a safetensors file, a full snapshot or a delta against the version
before (weights/encoder.py, wire.py), and either streams it into the side's object store bucket or leaves
it in a shared directory; a `WeightsVersion` (uri, sha256, base) announces it on `mgrpo.R.weights.<side>`.
An engine's process fetches the file by streaming (never nats-py's quadratic plain `get()`), checks the
sha256 and loads it between rollouts; one that missed versions fetches the ones before by name
(weights/chain.py). Kept: every version from the newest full snapshot on, and the `keep_versions` newest;
older ones are deleted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from mgrpo_actors.config.learner import WeightsConfig
from mgrpo_actors.phases import WEIGHTS, timed
from mgrpo_actors.runtime import Bus
from mgrpo_actors.runtime.disk import move_into
from protocols import WeightsVersion

__all__ = ["WeightsStore", "sha256_of"]

_OBJECT_PREFIX = "nats-os://"
_FILE_PREFIX = "file://"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class WeightsStore:
    """One side's published weights: `publish` on the learner, `fetch` where the engines run."""

    def __init__(self, bus: Bus, side: str, cfg: WeightsConfig, local_dir: Path) -> None:
        """local_dir: this process's scratch space for files (written before upload, or fetched)."""
        self.bus, self.side, self.cfg, self.local_dir = bus, side, cfg, Path(local_dir)
        self.bucket_name = bus.subjects.bucket(f"weights-{side}")
        self._bucket = bus.object_store(self.bucket_name) if cfg.transport == "object-store" else None
        self.shared_dir = Path(cfg.directory) / bus.run_id / side
        self._full: int | None = None  # the newest full snapshot this process published
        self._forgotten: int | None = None  # versions before this one are deleted

    def _name(self, version: int) -> str:
        return f"v{version}.safetensors"

    @timed(WEIGHTS)
    def publish(self, path: Path, version: int, step: int, base: int | None = None, sha256: str = "") -> WeightsVersion:
        """Make the file at `path` available as `version` (a delta against `base`; None: a full snapshot) and
        return its announcement (not yet sent). sha256: the file's, if known (else computed here)."""
        digest = sha256 or sha256_of(path)
        if self._bucket is not None:
            self._bucket.put_file(self._name(version), path, digest)
            uri = f"{_OBJECT_PREFIX}{self.bucket_name}/{self._name(version)}"
        else:
            # whole or not at all, across filesystems too (runtime/disk.py move_into)
            target = move_into(path, self.shared_dir / self._name(version), f"weights version {version}")
            uri = f"{_FILE_PREFIX}{target.resolve()}"
        self._forget_before(version, base)
        if self._bucket is not None:
            path.unlink()  # stored (and only now: a publish that failed part-way can be made again from it)
        return WeightsVersion(
            run_id=self.bus.run_id, side=self.side, version=version, step=step, uri=uri, sha256=digest, base=base
        )

    def _forget_before(self, version: int, base: int | None) -> None:
        """Delete what a late engine no longer needs: versions before both the newest full snapshot and the
        `keep_versions` newest. A learner that (re)started deletes what its predecessor may have left."""
        if base is None:
            self._full = version
        keep_from = min(self._full if self._full is not None else 1, version - self.cfg.keep_versions + 1)
        if self._forgotten is None:  # its predecessor kept at most this many
            self._forgotten = max(1, keep_from - max(self.cfg.full_every, self.cfg.keep_versions) - 1)
        for old in range(self._forgotten, keep_from):
            self._forget(old)
        self._forgotten = max(self._forgotten, keep_from)

    def _forget(self, version: int) -> None:
        if version < 1:
            return
        if self._bucket is not None:
            self._bucket.delete(self._name(version))
        else:
            (self.shared_dir / self._name(version)).unlink(missing_ok=True)

    def release(self, path: Path) -> None:
        """Delete a fetched file once its weights are loaded (never a file of the shared directory)."""
        if path.parent == self.local_dir:
            path.unlink(missing_ok=True)

    def fetch(self, announced: WeightsVersion) -> Path:
        """The file of an announced version, here; ValueError if its sha256 is not the announced one."""
        return self.fetch_version(announced, announced.version, announced.sha256)

    def fetch_version(self, announced: WeightsVersion, version: int, sha256: str) -> Path:
        """The file of `version`, published beside `announced` (a version before it, found by name), here;
        FileNotFoundError if it is gone, ValueError if its sha256 is not `sha256` (unchecked when empty)."""
        uri = (
            announced.uri
            if version == announced.version
            else f"{announced.uri.rpartition('/')[0]}/{self._name(version)}"
        )
        if uri.startswith(_FILE_PREFIX):
            path = Path(uri.removeprefix(_FILE_PREFIX))
            if sha256 and sha256_of(path) != sha256:
                raise ValueError(f"weights {uri} do not match their sha256 {sha256[:12]}…")
            return path
        bucket, _, name = uri.removeprefix(_OBJECT_PREFIX).partition("/")
        store = (
            self._bucket if bucket == self.bucket_name and self._bucket is not None else self.bus.object_store(bucket)
        )
        # The store checks the chunks against the object's digest, and that digest against sha256.
        return store.get_file(name, self.local_dir / f"{self.side}-{name}", sha256=sha256)
