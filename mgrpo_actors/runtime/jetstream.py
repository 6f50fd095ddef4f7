"""JetStream set-up of a run: its streams (design.md §Delivery and state) and durable consumers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import api as js_api

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.errors import BusError
from protocols import Subjects

log = get_logger(__name__)

__all__ = ["OBSERVABILITY_STREAMS", "REFUSE_WHEN_FULL_STREAMS", "WORK_QUEUE_STREAMS", "StreamLimits", "consumer_config", "ensure_streams", "jetstream_missing"]

# Streams whose messages are work for one consumer and go once acked (a JetStream work queue): the
# controller's rollout requests. Every other stream keeps its messages (limits) for replay and audit.
WORK_QUEUE_STREAMS = ("rollouts",)
# Streams of what people watch (metrics, events, dead letters): their own, smaller cap.
OBSERVABILITY_STREAMS = ("metrics", "dlq")
# Streams that, when full, refuse new messages (the publisher gets an error, a bus failure, and retries)
# rather than drop their oldest: the controller's requests and the learners' batches, which must never
# be discarded unprocessed. The others (trajectories, statistics, step reports, metrics, dead letters)
# drop their oldest when full: those were processed long before (a step's worth is far below the cap).
REFUSE_WHEN_FULL_STREAMS = ("rollouts", "batch-main", "batch-sub")


@dataclass(frozen=True)
class StreamLimits:
    """How much each of a run's streams may hold (the node config's `nats` section)."""

    max_age_s: float = 7 * 24 * 3600  # messages older than this go
    work_max_bytes: int = 4 << 30  # size cap of each other stream (requests, trajectories, batches, statistics, steps)
    observability_max_bytes: int = 256 << 20  # size cap of the metrics and dead-letter streams
    duplicate_window_s: float = 3600.0  # JetStream de-duplication window


def _stream_config(name: str, subjects: list[str], what: str, max_msg_bytes: int, limits: StreamLimits) -> js_api.StreamConfig:
    observability = what in OBSERVABILITY_STREAMS
    return js_api.StreamConfig(
        name=name,
        subjects=subjects,
        storage=js_api.StorageType.FILE,
        retention=js_api.RetentionPolicy.WORK_QUEUE if what in WORK_QUEUE_STREAMS else js_api.RetentionPolicy.LIMITS,
        max_age=limits.max_age_s,
        max_bytes=limits.observability_max_bytes if observability else limits.work_max_bytes,
        discard=js_api.DiscardPolicy.NEW if what in REFUSE_WHEN_FULL_STREAMS else js_api.DiscardPolicy.OLD,
        max_msg_size=max_msg_bytes,
        duplicate_window=limits.duplicate_window_s,
    )


async def ensure_streams(js: Any, subjects: Subjects, which: list[str], max_bytes: int, limits: StreamLimits) -> list[str]:
    """Create the run's streams named in `which` (the "what" of Subjects.stream) that do not exist yet;
    returns their names. An existing stream keeps its settings (the node that made it chose them); one
    that takes smaller messages than this node sends is reported."""
    streams = subjects.streams()
    names = [subjects.stream(what) for what in which]
    for what, name in zip(which, names, strict=True):
        config = _stream_config(name, streams[name], what, max_bytes, limits)
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            await js.add_stream(config)
            continue
        limit = info.config.max_msg_size
        if limit is not None and 0 < limit < max_bytes:
            log.warning("stream takes smaller messages than this node may send", stream=name, stream_max_msg_size=limit, node_max_bytes=max_bytes)
    return names


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
    return BusError(f"JetStream is not enabled at {url}: start nats-server with -js (or `jetstream {{}}` in its config)")
