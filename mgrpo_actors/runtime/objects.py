"""A JetStream object store bucket with a blocking API that streams files in and out.

Never the plain `get()`: nats-py builds its result by `bytes +=` (quadratic; nats.py#703: 270 MB took
176 s). Nor `get(name, writeinto=file)`, though it streams: it reads through a consumer, and a user
allowed to create consumers on a stream can have the server deliver that stream's messages onto any
subject of its account (nats-server does not check a consumer's delivery subject against its
creator's permissions). `read_object` fetches the chunks by batched direct gets instead (requests: the
answers come only to the reader's inbox), and what a direct get did not answer (a replica behind its
leader, a server without direct gets) by message gets from the stream's leader, so a chunk just written
is always found; it checks the digest. Weights travel this way (docs/architecture.md §One training step).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
from nats.js.api import Header, ObjectInfo, ObjectMetaOptions, ObjectStoreConfig

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.jetstream import ApiDenials, with_api_retries
from mgrpo_actors.runtime.loop import BusLoop
from mgrpo_actors.runtime.store_full import StoreWatch

log = get_logger(__name__)

__all__ = ["ObjectBucket", "meta_subject", "open_object_store", "read_object", "write_object"]

# A read that times out or finds the stream without a leader (a NATS server lost, an election under
# way) is made again, this far apart, for at most this long: the ordered consumer this replaced rode
# such a failover out too.
READ_RETRY_S = 1.0
READ_PATIENCE_S = 60.0
# Chunks per batched direct get (128 KiB each), at most this many bytes, and how long to wait for an answer.
DIRECT_BATCH = 64
DIRECT_BATCH_BYTES = 8 * 1024 * 1024
DIRECT_TIMEOUT_S = 5.0
# Chunks of an object (nats-py's size), read from the file this many bytes at a time, and at most this many
# published before their acks are awaited.
CHUNK_BYTES = 128 * 1024
PUT_READ_BYTES = 4 * 1024 * 1024
PUT_WINDOW = 64
PUT_ACK_TIMEOUT_S = 30.0


class ReadFailed(Exception):
    """A direct get answered with an error status."""


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


async def _direct_batch(
    js: Any, answers: asyncio.Queue, inbox: str, stream: str, subject: str, seq: int, count: int
) -> list[tuple[bytes, int]]:
    """Up to `count` (data, seq) of `subject` from `seq` on, by one batched direct get ([]: none there, as the
    server answering knows). ReadFailed on an error status; TimeoutError if nothing answers."""
    request = {"seq": seq, "next_by_subj": subject, "batch": count, "max_bytes": DIRECT_BATCH_BYTES}
    await js._nc.publish(f"{js._prefix}.DIRECT.GET.{stream}", json.dumps(request).encode(), reply=inbox)
    found: list[tuple[bytes, int]] = []
    while True:
        msg = await asyncio.wait_for(answers.get(), DIRECT_TIMEOUT_S)
        headers = msg.headers or {}
        status = headers.get("Status")
        if status in ("204", "404"):  # 204: the end of this batch; 404: nothing at or after seq
            return found
        if status or headers.get("Nats-Subject") != subject:
            raise ReadFailed(f"direct get on {stream}: status {status} {headers.get('Description', '')}".strip())
        found.append((msg.data or b"", int(headers["Nats-Sequence"])))


async def _chunk_batches(js: Any, stream: str, subject: str, chunks: int, what: str) -> AsyncIterator[list[bytes]]:
    """The `chunks` messages of `subject`, in stream order, a batch at a time: batched direct gets while they
    answer, then message gets from the leader (NotFoundError: a chunk is gone)."""
    inbox = js._nc.new_inbox()
    answers: asyncio.Queue = asyncio.Queue()
    sub = await js._nc.subscribe(inbox, cb=answers.put)
    seq, read, direct = 1, 0, True
    try:
        while read < chunks:
            batch: list[tuple[bytes, int]] = []
            if direct:
                try:
                    batch = await _direct_batch(
                        js, answers, inbox, stream, subject, seq, min(DIRECT_BATCH, chunks - read)
                    )
                except (TimeoutError, ReadFailed, nats.errors.Error) as exc:
                    log.warning(
                        "direct get of object chunks failed; reading by message get", what=what, error=repr(exc)
                    )
                direct = bool(batch)
            if not batch:
                msg = await _patiently(
                    lambda seq=seq: js._jsm.get_msg(stream, seq=seq, subject=subject, next=True), f"{what} chunk"
                )
                batch = [(msg.data or b"", msg.seq)]
            seq, read = batch[-1][1] + 1, read + len(batch)
            yield [data for data, _ in batch]
    finally:
        await sub.unsubscribe()


def _write_batch(into: Any, digest: Any, batch: list[bytes]) -> None:
    for data in batch:
        into.write(data)
        digest.update(data)


def meta_subject(bucket: str, name: str) -> str:
    """The subject of object `name`'s meta entry (nats.py's object store names it so)."""
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


async def _delete_object(js: Any, store: Any, bucket: str, name: str) -> None:
    """nats.py's delete, which leaves a "deleted" meta entry per name for ever (a learner deletes one version a
    step: measured, its bucket grew ~340 B a step), then that entry purged too: a reader then finds no object."""
    try:
        await store.delete(name)
    except nats.js.errors.ObjectNotFoundError:
        pass
    await js.purge_stream(f"OBJ_{bucket}", subject=meta_subject(bucket, name))


async def read_object(js: Any, store: Any, bucket: str, name: str, into: Any, sha256: str = "") -> int:
    """Write object `name` of `bucket` (nats-py's `store`) to the binary file `into`, chunk by chunk,
    without a consumer; returns its size. ObjectNotFoundError if absent; ValueError if its recorded digest
    is not `sha256` (hex; unchecked when empty) or the chunks do not add up to the object's size and digest."""
    info = await _patiently(lambda: store.get_info(name), f"{bucket}/{name} info")
    if not info.nuid:
        raise ValueError(f"object {name!r} in bucket {bucket!r} has no chunks recorded (a broken meta entry)")
    # nats-py's "SHA-256=<base64>"
    expected = base64.urlsafe_b64decode((info.digest or "").removeprefix("SHA-256=").removeprefix("sha-256="))
    if sha256 and expected.hex() != sha256:
        raise ValueError(
            f"object {name!r} in bucket {bucket!r} has sha256 {expected.hex()[:12]}…, not the {sha256[:12]}… expected"
        )
    if not info.size:
        return 0
    stream, subject = f"OBJ_{bucket}", f"$O.{bucket}.C.{info.nuid}"
    digest, size = hashlib.sha256(), 0
    loop = asyncio.get_running_loop()
    writing: asyncio.Future | None = None
    async for batch in _chunk_batches(js, stream, subject, info.chunks or 0, f"{bucket}/{name}"):
        if writing is not None:
            await writing
        # Written and hashed off the bus thread's loop, while the next batch arrives.
        writing = loop.run_in_executor(None, _write_batch, into, digest, batch)
        size += sum(len(data) for data in batch)
    if writing is not None:
        await writing
    if size != info.size or digest.digest() != expected:
        raise ValueError(
            f"object {name!r} in bucket {bucket!r}: read {size} of {info.size} bytes, "
            f"digest {'matches' if digest.digest() == expected else 'differs'}"
        )
    return size


async def write_object(js: Any, store: Any, bucket: str, name: str, source: Any, sha256: str = "") -> int:
    """Store the binary file `source` as object `name` of `bucket` (nats-py's `store`), as nats-py's `put` lays
    it out (chunks of 128 KiB on a new nuid, then the meta entry, then the old chunks purged), but with up to
    PUT_WINDOW chunks published before their acks are awaited, not one at a time; returns its size. sha256:
    the file's digest (hex) if the caller has it (its writer hashed it), else computed here; readers check
    the chunks against it."""
    try:
        old = await store.get_info(name)
    except nats.js.errors.NotFoundError:
        old = None
    nuid = js._nc._nuid.next().decode()
    chunk_subject, stream = f"$O.{bucket}.C.{nuid}", f"OBJ_{bucket}"
    digest, size, chunks = hashlib.sha256(), 0, 0
    loop = asyncio.get_running_loop()
    acks: deque[asyncio.Future] = deque()
    try:
        while block := await loop.run_in_executor(None, source.read, PUT_READ_BYTES):  # off the bus thread's loop
            if not sha256:
                await loop.run_in_executor(None, digest.update, block)
            for start in range(0, len(block), CHUNK_BYTES):
                acks.append(await js.publish_async(chunk_subject, block[start : start + CHUNK_BYTES]))
                chunks += 1
                while len(acks) > PUT_WINDOW:
                    await asyncio.wait_for(acks.popleft(), PUT_ACK_TIMEOUT_S)
            size += len(block)
        while acks:
            await asyncio.wait_for(acks.popleft(), PUT_ACK_TIMEOUT_S)
        info = ObjectInfo(
            name=name,
            bucket=bucket,
            nuid=nuid,
            size=size,
            chunks=chunks,
            mtime=datetime.now(UTC).isoformat(),
            digest="SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(sha256) if sha256 else digest.digest()).decode(),
            options=ObjectMetaOptions(max_chunk_size=CHUNK_BYTES),
        )
        await js.publish(
            meta_subject(bucket, name), json.dumps(info.as_dict()).encode(), headers={Header.ROLLUP: "sub"}
        )
    except BaseException:
        for ack in acks:
            ack.cancel()
        await js.purge_stream(stream, subject=chunk_subject)
        raise
    if old is not None and not old.deleted:
        await js.purge_stream(stream, subject=f"$O.{bucket}.C.{old.nuid}")
    return size


@dataclass
class ObjectBucket:
    """Objects of one bucket; every call blocks the calling (actor) thread, never the bus thread."""

    loop: BusLoop
    name: str
    _store: Any
    timeout_s: float = 600.0  # large objects take a while on slow links
    # a chunk that finds the server's store full: StoreFull, and the run stopped (the bus's; runtime/store_full.py)
    store_watch: StoreWatch = field(default_factory=StoreWatch)

    def put_file(self, name: str, path: str | Path, sha256: str = "") -> int:
        """Store the file at `path` as object `name` (read in chunks); returns its size. sha256: the file's digest
        (hex), if known."""
        with open(path, "rb") as f, self.store_watch.writing(f"object {self.name}/{name}", CHUNK_BYTES):
            return self.loop.call(
                write_object(self._store._js, self._store, self.name, name, f, sha256), timeout=self.timeout_s
            )

    def get_file(self, name: str, path: str | Path, sha256: str = "") -> Path:
        """Write object `name` to `path` as it arrives; FileNotFoundError naming it if it is not there, ValueError
        if its digest is not `sha256` (hex; unchecked when empty)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "wb") as f:
                read = read_object(self._store._js, self._store, self.name, name, f, sha256)
                self.loop.call(read, timeout=self.timeout_s)
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
        """Delete object `name`, leaving nothing of it in the bucket (absent already: nothing to do)."""
        self.loop.call(_delete_object(self._store._js, self._store, self.name, name))
