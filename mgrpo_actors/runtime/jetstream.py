"""JetStream set-up of a run: its streams (docs/architecture.md §Delivery and state) and durable consumers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.js import api as js_api

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.errors import BusError
from protocols import Subjects

log = get_logger(__name__)

__all__ = [
    "DISCARD_OLD_STREAMS",
    "WORK_QUEUE_STREAMS",
    "StreamLimits",
    "consumer_config",
    "ensure_streams",
    "jetstream_missing",
    "recreate_streams",
    "stream_config",
    "ApiDenials",
    "with_api_retries",
]

T = TypeVar("T")

# A JetStream API call that timed out is tried again, this many times in all, this long apart: on a
# cluster the API answers slowly while streams are being created in 3 replicas or a leader is being
# elected (measured: a node starting with 7 others on a 3-server loopback cluster timed out once).
API_ATTEMPTS = 5
API_PAUSE_S = 1.0


class ApiDenials:
    """JetStream API calls the server refused this connection (its user's permissions). nats-py sees a
    refused request only as a timeout; the server's "permissions violation" comes to the error
    callback, which records it here, so the caller can say so at once instead of retrying."""

    def __init__(self) -> None:
        self._subjects: list[str] = []

    def record(self, exc: BaseException) -> None:
        text = str(exc)
        if "permissions violation for publish to" in text and '"$js.' in text:
            self._subjects.append(text.split('"')[1])

    def take(self) -> str:
        """The refused API subjects since the last take ("" if none)."""
        subjects, self._subjects = self._subjects, []
        return ", ".join(dict.fromkeys(subjects))


async def with_api_retries(call: Callable[[], Awaitable[T]], what: str, denials: ApiDenials | None = None) -> T:
    """`await call()`, again after a JetStream API timeout (at most API_ATTEMPTS times in all); a
    timeout the server caused by refusing the call (`denials`) is a BusError at once."""
    for attempt in range(1, API_ATTEMPTS + 1):
        try:
            return await call()
        except nats.errors.TimeoutError:
            if denials is not None and (refused := denials.take()):
                raise BusError(
                    f"NATS refused {what} ({refused}): this node's user may not do that (its role's permissions; "
                    "streams and buckets are made beforehand by `mgrpo deploy provision`)"
                ) from None
            if attempt == API_ATTEMPTS:
                raise
            log.warning("JetStream API call timed out; trying again", what=what, attempt=attempt, of=API_ATTEMPTS)
            await asyncio.sleep(API_PAUSE_S)
    raise AssertionError("unreachable")


# Streams whose messages are work for one consumer and go once acked (a JetStream work queue): the
# controller's rollout requests. Every other stream keeps its messages (limits) for replay and audit.
WORK_QUEUE_STREAMS = ("rollouts",)
# Streams that, full, drop their oldest messages: those for watching a run, and the step plans and events,
# whose readers are never thousands of steps behind (the controller's watchdog stops a run that stalls). Every
# other stream carries work: full, it refuses new messages (the publisher gets an error and retries) and
# never drops one unread; what its one reader acknowledged goes (runtime/retention.py).
DISCARD_OLD_STREAMS = ("metrics", "dlq", "steps")


@dataclass(frozen=True)
class StreamLimits:
    """How much the run's streams keep (by count and age, never by bytes: JetStream reserves a stream's
    max_bytes against the server's storage up front, so byte caps on many runs exhaust a server)."""

    max_age_s: float = 7 * 24 * 3600.0  # messages older than this go
    duplicate_window_s: float = 3600.0  # JetStream de-duplication window
    # stream ("dlq", "metrics", …) -> most messages kept; absent or 0 = no count limit
    max_msgs: dict[str, int] = field(default_factory=dict)
    replicas: int = 1  # copies of every stream, KV and object store on a cluster (3 survives losing a server)


def stream_config(subjects: Subjects, what: str, limits: StreamLimits, max_bytes: int) -> js_api.StreamConfig:
    """The JetStream configuration of the run's stream `what`."""
    return js_api.StreamConfig(
        name=subjects.stream(what),
        subjects=subjects.streams()[subjects.stream(what)],
        storage=js_api.StorageType.FILE,
        retention=js_api.RetentionPolicy.WORK_QUEUE if what in WORK_QUEUE_STREAMS else js_api.RetentionPolicy.LIMITS,
        max_age=limits.max_age_s,
        max_msgs=limits.max_msgs.get(what) or -1,
        discard=js_api.DiscardPolicy.OLD if what in DISCARD_OLD_STREAMS else js_api.DiscardPolicy.NEW,
        max_msg_size=max_bytes,
        duplicate_window=limits.duplicate_window_s,
        num_replicas=limits.replicas,
        allow_direct=True,  # readers read by batched direct gets, never through consumers (runtime/stream_reader.py)
    )


async def ensure_streams(
    js: Any,
    subjects: Subjects,
    which: list[str],
    limits: StreamLimits,
    max_bytes: int,
    denials: ApiDenials | None = None,
) -> list[str]:
    """Create the run's streams named in `which` (the "what" of Subjects.stream) that do not exist yet
    (again, if the server lost them); returns their names. An existing stream keeps its settings (the
    node that made it chose them); one that takes smaller messages than this node sends is reported."""
    names = []
    for what in which:
        config = stream_config(subjects, what, limits, max_bytes)
        name = config.name
        names.append(name)
        try:
            info = await with_api_retries(lambda name=name: js.stream_info(name), f"stream info {name}", denials)
        except nats.js.errors.NotFoundError:
            await with_api_retries(lambda config=config: js.add_stream(config), f"create stream {name}", denials)
            log.info(
                "stream created",
                stream=name,
                max_msgs=config.max_msgs,
                discard=config.discard.value if config.discard else None,
            )
            continue
        limit = info.config.max_msg_size
        if limit is not None and 0 < limit < max_bytes:
            log.warning(
                "stream takes smaller messages than this node may send",
                stream=name,
                stream_max_msg_size=limit,
                node_max_bytes=max_bytes,
            )
    return names


async def recreate_streams(
    js: Any, subjects: Subjects, which: list[str], limits: StreamLimits, max_bytes: int, why: str
) -> None:
    """ensure_streams again for the streams a node made (a server may have lost them); failures are logged."""
    if which:
        try:
            await ensure_streams(js, subjects, which, limits, max_bytes)
        except Exception as exc:
            log.warning("streams not checked", why=why, error=f"{type(exc).__name__}: {exc}")


def jetstream_missing(exc: BaseException) -> bool:
    """True when `exc` says the server has no JetStream."""
    return isinstance(exc, (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError))


def consumer_config(durable: str, ack_wait_s: float, max_ack_pending: int, max_deliver: int) -> js_api.ConsumerConfig:
    """A durable pull consumer with explicit ack."""
    return js_api.ConsumerConfig(
        durable_name=durable,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
        max_deliver=max_deliver,
    )


def no_jetstream_error(url: str) -> BusError:
    return BusError(
        f"JetStream is not enabled at {url}: start nats-server with -js (or `jetstream {{}}` in its config)"
    )
