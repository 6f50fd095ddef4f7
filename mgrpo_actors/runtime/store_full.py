"""The NATS server's JetStream store filling up while a run goes on: recognised where the bus writes into it (a
stream publish, a KV put, an object's chunks), said in one line naming the store, and the run stopped.

nats-server says a full store in two ways (v2.15, one server, measured on a tmpfs):

- its JetStream storage limit reached (`max_file_store`; unset, 75 % of the disk free when it started): the
  publish is answered at once with "insufficient resources" (err_code 10023; 10047 where a reservation does not
  fit, 10002 at an account's own limit, a store error naming "no space left" where the server passes the OS's on);
- its disk full before that limit (another writer filled it): the server logs "no space left on device" and does
  not answer the publish at all ("we don't want to respond back to the user"), so the publisher only sees a
  timeout. Only the process that started the server knows where its store is (`store_dir`): a timeout counts as a
  full store when that device has no room left (runtime/disk.py `no_space_left`) or less than the message.

Before this, every role handed its work back and tried again, for ever: the stall watchdog ended the run only
after `pipeline.stall_timeout_s` (+ `rollout_timeout_s`), 90 minutes by default. A full store is not a passing
failure of one message: nothing of the run can be stored until someone frees space, and `--resume` then continues
from what the store holds (what failed was never acknowledged, so it is redelivered and made again).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import nats.js.errors

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.disk import no_space_left
from mgrpo_actors.runtime.errors import BusError

__all__ = ["STORE_FULL_CODES", "StoreFull", "StoreWatch", "store_full"]

log = get_logger(__name__)

# JetStream's error codes for a store without room, as a publish is answered: insufficient resources (the server's
# storage limit reached), insufficient storage resources available (a reservation that does not fit), resource
# limits exceeded for account (an account's own storage limit: nothing more of the run fits either).
STORE_FULL_CODES = frozenset({10002, 10023, 10047})


class StoreFull(BusError):
    """The NATS server's JetStream store has no room for what the run writes; its message names the store."""

    def __init__(self, store: str, why: str, detail: str, hint: str = "") -> None:
        super().__init__(f"the NATS server's JetStream store is full: {why} in {store} ({detail}){hint}")
        self.store = store


def _refusal(exc: BaseException) -> str | None:
    """What nats-server said, if `exc` is its answer that the store has no room (None for any other error)."""
    if not isinstance(exc, nats.js.errors.APIError):
        return None
    description = exc.description or ""
    if exc.err_code in STORE_FULL_CODES or "no space left" in description.lower():
        return f"{description or 'no room'}, err_code {exc.err_code}"
    return None


def _device_full(store_dir: Path, size: int) -> bool:
    """Whether the device of `store_dir` has no room left, or less than `size` bytes (the message not stored)."""
    if no_space_left(OSError("no answer"), store_dir):
        return True
    try:
        return shutil.disk_usage(store_dir).free < size
    except OSError:
        return False


def store_full(
    exc: BaseException, what: str, *, store_dir: str | os.PathLike[str] | None, where: str, size: int = 0
) -> StoreFull | None:
    """`exc`, raised while writing `what` (`size` bytes) into the server's store, as a StoreFull; None when it is
    not one. store_dir: where that store is, when this process started the server (then a timeout on a full
    device counts, and the message says to free space there and resume); where: how to name a server whose store
    is elsewhere (its URL)."""
    hint = "; free space there and continue with --resume" if store_dir is not None else ""
    store = str(store_dir) if store_dir is not None else f"the server at {where}"
    if (said := _refusal(exc)) is not None:
        return StoreFull(store, "no space left within its storage limit", f"nats-server: {said}, on {what}", hint)
    if store_dir is not None and isinstance(exc, TimeoutError) and _device_full(Path(store_dir), size):
        return StoreFull(store, "no space left on device", f"{what} got no answer", hint)
    return None


class StoreWatch:
    """One bus's view of its server's store: turns a write's failure into StoreFull and, the first time, says so
    and stops the run (`on_full(message)`: Bus.on_run_stopped, its node then exits 3 with the message)."""

    def __init__(
        self,
        store_dir: str | os.PathLike[str] | None = None,
        where: str = "",
        on_full: Callable[[str], None] | None = None,
    ) -> None:
        self.store_dir = Path(store_dir) if store_dir is not None else None
        self.where = where
        self.on_full = on_full
        self.full: StoreFull | None = None  # the first one found: the run is being stopped
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def writing(self, what: str, size: int = 0) -> Iterator[None]:
        """Around one write into the store: a failure that means the store is full leaves as StoreFull (a BusError:
        actors hand their delivery back, nothing is acknowledged), any other failure as it came."""
        try:
            yield
        except StoreFull:  # said already, by a write within this one
            raise
        except Exception as exc:
            full = store_full(exc, what, store_dir=self.store_dir, where=self.where, size=size)
            if full is None:
                raise
            self._found(full)
            raise full from exc

    def _found(self, full: StoreFull) -> None:
        with self._lock:
            first, self.full = self.full is None, self.full or full
        if not first:
            return
        log.error("the NATS server's JetStream store is full: stopping the run", store=full.store, error=str(full))
        if self.on_full is not None:
            self.on_full(str(full))
