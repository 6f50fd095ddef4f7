"""A JetStream object store bucket with a blocking API that streams files in and out.

Never the plain `get()`: nats-py builds its result by `bytes +=` (quadratic; nats.py#703: 270 MB took
176 s). Nor `get(name, writeinto=file)`, though it streams: it reads through a consumer, and a user
allowed to create consumers on a stream can have the server deliver that stream's messages onto any
subject of its account (nats-server does not check a consumer's delivery subject against its
creator's permissions). `read_object` fetches the chunks one by one with the stream's message get
instead (from the stream's leader, so a chunk just written is always found), and checks the digest.
Weights travel this way (docs/architecture.md §One training step).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
from nats.js.api import ObjectStoreConfig

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.jetstream import ApiDenials, with_api_retries
from mgrpo_actors.runtime.loop import BusLoop

log = get_logger(__name__)

__all__ = ["ObjectBucket", "open_object_store", "read_object"]

# A read that times out or finds the stream without a leader (a NATS server lost, an election under
# way) is made again, this far apart, for at most this long: the ordered consumer this replaced rode
# such a failover out too.
READ_RETRY_S = 1.0
READ_PATIENCE_S = 60.0


async def _patiently(read: Any, what: str) -> Any:
    """`await read()`, again after a passing failure for up to READ_PATIENCE_S (NotFoundError at once)."""
    deadline = asyncio.get_running_loop().time() + READ_PATIENCE_S
    while True:
        try:
            return await read()
        except nats.js.errors.NotFoundError:
            raise
        except (
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.js.errors.ServiceUnavailableError,
            nats.errors.ConnectionReconnectingError,
        ) as exc:
            if asyncio.get_running_loop().time() >= deadline:
                raise
            log.warning("object read failed; trying again", what=what, error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(READ_RETRY_S)


async def open_object_store(js: Any, bucket: str, replicas: int = 1, denials: ApiDenials | None = None) -> Any:
    """nats-py's object store `bucket`, created if missing."""
    try:
        return await with_api_retries(lambda: js.object_store(bucket), f"object store {bucket}", denials)
    except nats.js.errors.BucketNotFoundError:
        return await with_api_retries(
            lambda: js.create_object_store(bucket, config=ObjectStoreConfig(bucket=bucket, replicas=replicas)),
            f"create object store {bucket}",
            denials,
        )


async def read_object(js: Any, store: Any, bucket: str, name: str, into: Any) -> int:
    """Write object `name` of `bucket` (nats-py's `store`) to the binary file `into`, chunk by chunk,
    without a consumer; returns its size. ObjectNotFoundError if absent; ValueError if the chunks do
    not add up to the object's size and digest."""
    info = await _patiently(lambda: store.get_info(name), f"{bucket}/{name} info")
    if not info.nuid:
        raise ValueError(f"object {name!r} in bucket {bucket!r} has no chunks recorded (a broken meta entry)")
    if not info.size:
        return 0
    stream, subject = f"OBJ_{bucket}", f"$O.{bucket}.C.{info.nuid}"
    digest, size, seq = hashlib.sha256(), 0, 1
    loop = asyncio.get_running_loop()
    for _ in range(info.chunks or 0):
        # The first chunk of this object at or after `seq`: the chunks of one object are in stream order.
        msg = await _patiently(
            lambda seq=seq: js._jsm.get_msg(stream, seq=seq, subject=subject, next=True), f"{bucket}/{name} chunk"
        )
        data = msg.data or b""
        await loop.run_in_executor(None, into.write, data)  # off the bus thread's loop: a chunk is up to 128 KiB
        digest.update(data)
        size += len(data)
        seq = msg.seq + 1
    # nats-py's "SHA-256=<base64>"
    expected = base64.urlsafe_b64decode((info.digest or "").removeprefix("SHA-256=").removeprefix("sha-256="))
    if size != info.size or digest.digest() != expected:
        raise ValueError(
            f"object {name!r} in bucket {bucket!r}: read {size} of {info.size} bytes, "
            f"digest {'matches' if digest.digest() == expected else 'differs'}"
        )
    return size


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
                self.loop.call(read_object(self._store._js, self._store, self.name, name, f), timeout=self.timeout_s)
        # absent, or deleted while being read (an old version let go)
        except (nats.js.errors.ObjectNotFoundError, nats.js.errors.NotFoundError):
            path.unlink(missing_ok=True)
            raise FileNotFoundError(
                f"no object {name!r} in bucket {self.name!r} (or it was deleted while being read)"
            ) from None
        except BaseException:
            path.unlink(missing_ok=True)  # never leave a partial file that looks like the object
            raise
        return path

    def delete(self, name: str) -> None:
        try:
            self.loop.call(self._store.delete(name))
        except nats.js.errors.ObjectNotFoundError:
            pass
