"""A JetStream KV bucket with a blocking API, and watches delivered into an actor's mailbox."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats.js.errors

from mgrpo_actors.runtime.delivery import KvUpdate
from mgrpo_actors.runtime.jetstream import ApiDenials, with_api_retries
from mgrpo_actors.runtime.loop import BusLoop, cancel_task
from mgrpo_actors.runtime.store_full import StoreWatch
from mgrpo_actors.runtime.targets import Target, tell
from protocols import Message, encode

__all__ = ["KvBucket", "open_kv"]


async def open_kv(js: Any, bucket: str, history: int, replicas: int = 1, denials: ApiDenials | None = None) -> Any:
    """nats-py's KV bucket `bucket`, created if missing."""
    try:
        return await with_api_retries(lambda: js.key_value(bucket), f"KV bucket {bucket}", denials)
    except nats.js.errors.BucketNotFoundError:
        return await with_api_retries(
            lambda: js.create_key_value(bucket=bucket, history=history, replicas=replicas),
            f"create KV bucket {bucket}",
            denials,
        )


@dataclass
class KvBucket:
    """Small shared state of a run (docs/architecture.md §Delivery and state): reward statistics, versions, run
    state."""

    loop: BusLoop
    name: str
    _kv: Any
    max_bytes: int  # encode limit of a Message value
    # a put that finds the server's store full raises StoreFull and stops the run (the bus's; runtime/store_full.py)
    store_watch: StoreWatch = field(default_factory=StoreWatch)
    # the bus's record of API calls the server refused (a refusal is an error at once, never waited out again)
    denials: ApiDenials | None = None

    def get(self, key: str) -> bytes | None:
        # Reads are asked again after a timeout: on a cluster a bucket just made (or whose leader just moved)
        # may not answer its first get within nats-py's 5 s; a node's start read its state that way and died.
        async def _get() -> bytes | None:
            try:
                entry = await with_api_retries(lambda: self._kv.get(key), f"KV get {self.name}/{key}", self.denials)
            except nats.js.errors.KeyNotFoundError:
                return None
            return entry.value

        return self.loop.call(_get(), timeout=60)  # room for with_api_retries' 5 attempts of 5 s and pauses (~29 s)

    def put(self, key: str, value: bytes | Message) -> int:
        data = encode(value, self.max_bytes) if isinstance(value, Message) else value
        with self.store_watch.writing(f"KV put {self.name}/{key}", len(data)):
            return self.loop.call(self._kv.put(key, data))

    def delete(self, key: str) -> None:
        self.loop.call(self._kv.delete(key))

    def keys(self) -> list[str]:
        async def _keys() -> list[str]:
            try:
                return list(await with_api_retries(self._kv.keys, f"KV keys of {self.name}", self.denials))
            except nats.js.errors.NoKeysError:
                return []

        # nats-py's keys() makes two API calls an attempt (a watcher's consumer, then its info): up to ~54 s
        return self.loop.call(_keys(), timeout=90)

    def watch(self, keys: str, target: Target, include_history: bool = False) -> Callable[[], None]:
        """Tell `target` a KvUpdate for every change of `keys` (wildcards allowed); returns a stop function."""

        async def _watch() -> asyncio.Task:
            watcher = await self._kv.watch(keys, include_history=include_history)

            async def pump() -> None:
                try:
                    async for entry in watcher:
                        if entry is None:  # marks the end of the initial values
                            continue
                        op = entry.operation or "PUT"
                        value = entry.value if op == "PUT" else None
                        tell(target, KvUpdate(self.name, entry.key, value, entry.revision or 0, str(op)))
                finally:
                    await watcher.stop()

            return asyncio.ensure_future(pump())

        task = self.loop.call(_watch())
        return lambda: self.loop.call(cancel_task(task)) if self.loop.running else None
