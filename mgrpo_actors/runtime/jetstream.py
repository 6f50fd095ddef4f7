"""JetStream set-up of a run: its streams (design.md §Delivery and state) and durable consumers."""

from __future__ import annotations

from typing import Any

import nats.errors
import nats.js.errors
from nats.js import api as js_api

from mgrpo_actors.log import get_logger
from mgrpo_actors.runtime.errors import BusError
from protocols import Subjects

log = get_logger(__name__)

__all__ = ["WORK_QUEUE_STREAMS", "consumer_config", "ensure_streams", "jetstream_missing"]

# Streams whose messages are work for one consumer and go once acked (a JetStream work queue): the
# controller's rollout requests. Every other stream keeps its messages (limits) for replay and audit.
WORK_QUEUE_STREAMS = ("rollouts",)


def _stream_config(name: str, subjects: list[str], work_queue: bool, max_age_s: float, max_bytes: int, duplicate_window_s: float) -> js_api.StreamConfig:
    return js_api.StreamConfig(
        name=name,
        subjects=subjects,
        storage=js_api.StorageType.FILE,
        retention=js_api.RetentionPolicy.WORK_QUEUE if work_queue else js_api.RetentionPolicy.LIMITS,
        max_age=max_age_s,
        max_msg_size=max_bytes,
        duplicate_window=duplicate_window_s,
    )


async def ensure_streams(js: Any, subjects: Subjects, which: list[str], max_age_s: float, max_bytes: int, duplicate_window_s: float) -> list[str]:
    """Create the run's streams named in `which` (the "what" of Subjects.stream) that do not exist yet;
    returns their names. An existing stream keeps its settings (the node that made it chose them); one
    that takes smaller messages than this node sends is reported."""
    work_queues = {subjects.stream(what) for what in WORK_QUEUE_STREAMS}
    streams = subjects.streams()
    names = [subjects.stream(what) for what in which]
    for name in names:
        config = _stream_config(name, streams[name], name in work_queues, max_age_s, max_bytes, duplicate_window_s)
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
