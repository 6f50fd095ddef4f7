"""A JetStream object store bucket with a blocking API that streams files in and out.

Never the plain `get()`: nats-py builds its result by `bytes +=` (quadratic; nats.py#703: 270 MB took
176 s), while `get(name, writeinto=file)` streams (4.6 s). Weights travel this way (design.md §One
training step).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats.js.errors
from nats.js.api import ObjectStoreConfig

from mgrpo_actors.runtime.jetstream import ApiDenials, with_api_retries
from mgrpo_actors.runtime.loop import BusLoop

__all__ = ["ObjectBucket", "open_object_store"]


async def open_object_store(js: Any, bucket: str, replicas: int = 1, denials: ApiDenials | None = None) -> Any:
    """nats-py's object store `bucket`, created if missing."""
    try:
        return await with_api_retries(lambda: js.object_store(bucket), f"object store {bucket}", denials)
    except nats.js.errors.BucketNotFoundError:
        return await with_api_retries(lambda: js.create_object_store(bucket, config=ObjectStoreConfig(bucket=bucket, replicas=replicas)), f"create object store {bucket}", denials)


@dataclass
class ObjectBucket:
    """Objects of one bucket; every call blocks the calling (actor) thread, never the bus thread."""

    loop: BusLoop
    name: str
    _store: Any
    timeout_s: float = 600.0  # large objects take a while on slow links

    def put_file(self, name: str, path: str | Path) -> int:
        """Store the file at `path` as object `name` (read in chunks); returns its size."""
        with open(path, "rb") as f:
            info = self.loop.call(self._store.put(name, f), timeout=self.timeout_s)
        return int(info.size)

    def get_file(self, name: str, path: str | Path) -> Path:
        """Write object `name` to `path` as it arrives; FileNotFoundError naming it if it is not there."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "wb") as f:
                self.loop.call(self._store.get(name, writeinto=f), timeout=self.timeout_s)
        except nats.js.errors.ObjectNotFoundError:
            path.unlink(missing_ok=True)
            raise FileNotFoundError(f"no object {name!r} in bucket {self.name!r}") from None
        return path

    def delete(self, name: str) -> None:
        try:
            self.loop.call(self._store.delete(name))
        except nats.js.errors.ObjectNotFoundError:
            pass
