"""New policy versions from a learner to its side's rollout engines (docs/architecture.md §One training step,
step 6; §Delivery and state: "Weights travel by a shared directory or the NATS object store").

The learner writes the model's weights once as safetensors (tied aliases left out: the engines'
`check_fits` allows that) and either streams the file into the side's object store bucket or leaves
it in a shared directory; a `WeightsVersion` (uri, sha256) announces it on `mgrpo.R.weights.<side>`.
An engine's process fetches the file by streaming (never nats-py's quadratic plain `get()`), checks the
sha256 and loads it between rollouts. Older versions than `keep_versions` are deleted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors.torch import save_file

from mgrpo_actors.config.learner import WeightsConfig
from mgrpo_actors.phases import WEIGHTS, timed
from mgrpo_actors.runtime import Bus
from mgrpo_actors.weights.files import tied_aliases
from protocols import WeightsVersion

__all__ = ["WeightsStore", "save_weights", "sha256_of"]

_OBJECT_PREFIX = "nats-os://"
_FILE_PREFIX = "file://"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@timed(WEIGHTS)
def save_weights(state: dict[str, torch.Tensor], module: torch.nn.Module, path: Path) -> Path:
    """`state` (a full state dict of `module`) as one safetensors file, without tied aliases."""
    skip = tied_aliases(module)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({name: t.detach().to("cpu").contiguous() for name, t in state.items() if name not in skip}, str(path))
    return path


class WeightsStore:
    """One side's published weights: `publish` on the learner, `fetch` where the engines run."""

    def __init__(self, bus: Bus, side: str, cfg: WeightsConfig, local_dir: Path) -> None:
        """local_dir: this process's scratch space for files (written before upload, or fetched)."""
        self.bus, self.side, self.cfg, self.local_dir = bus, side, cfg, Path(local_dir)
        self.bucket_name = bus.subjects.bucket(f"weights-{side}")
        self._bucket = bus.object_store(self.bucket_name) if cfg.transport == "object-store" else None
        self.shared_dir = Path(cfg.directory) / bus.run_id / side

    def _name(self, version: int) -> str:
        return f"v{version}.safetensors"

    @timed(WEIGHTS)
    def publish(self, path: Path, version: int, step: int) -> WeightsVersion:
        """Make the file at `path` available as `version` and return its announcement (not yet sent)."""
        digest = sha256_of(path)
        if self._bucket is not None:
            self._bucket.put_file(self._name(version), path)
            uri = f"{_OBJECT_PREFIX}{self.bucket_name}/{self._name(version)}"
        else:
            target = self.shared_dir / self._name(version)
            target.parent.mkdir(parents=True, exist_ok=True)
            path.replace(target)
            uri = f"{_FILE_PREFIX}{target.resolve()}"
        self._forget(version - self.cfg.keep_versions)
        if self._bucket is not None:
            path.unlink()  # stored (and only now: a publish that failed part-way can be made again from it)
        return WeightsVersion(
            run_id=self.bus.run_id, side=self.side, version=version, step=step, uri=uri, sha256=digest
        )

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
        if announced.uri.startswith(_FILE_PREFIX):
            path = Path(announced.uri.removeprefix(_FILE_PREFIX))
        else:
            bucket, _, name = announced.uri.removeprefix(_OBJECT_PREFIX).partition("/")
            store = (
                self._bucket
                if bucket == self.bucket_name and self._bucket is not None
                else self.bus.object_store(bucket)
            )
            path = store.get_file(name, self.local_dir / f"{self.side}-{name}")
        if announced.sha256 and sha256_of(path) != announced.sha256:
            raise ValueError(f"weights {announced.uri} do not match their sha256 {announced.sha256[:12]}…")
        return path
