"""JetStream set-up of a run: its streams (design.md §Delivery and state) and durable consumers."""

from __future__ import annotations

from typing import Any

import nats.errors
import nats.js.errors
from nats.js import api as js_api

from mgrpo_actors.runtime.errors import BusError
from protocols import Subjects

__all__ = ["WORK_QUEUE_STREAMS", "consumer_config", "ensure_streams", "jetstream_missing"]

# Streams whose messages are work for one consumer and go once acked (a JetStream work queue): the
# controller's rollout requests. Every other stream keeps its messages (limits) for replay and audit.
WORK_QUEUE_STREAMS = ("rollouts",)


def _stream_config(name: str, subjects: list[str], work_queue: bool, max_age_s: float, max_bytes: int) -> js_api.StreamConfig:
    return js_api.StreamConfig(
        name=name,
        subjects=subjects,
        storage=js_api.StorageType.FILE,
        retention=js_api.RetentionPolicy.WORK_QUEUE if work_queue else js_api.RetentionPolicy.LIMITS,
        max_age=max_age_s,
        max_msg_size=max_bytes,
    )


async def ensure_streams(js: Any, subjects: Subjects, max_age_s: float, max_bytes: int) -> list[str]:
    """Create or update every stream of the run (protocols.Subjects.streams); returns their names."""
    work_queues = {subjects.stream(what) for what in WORK_QUEUE_STREAMS}
    for name, captured in subjects.streams().items():
        config = _stream_config(name, captured, name in work_queues, max_age_s, max_bytes)
        try:
            await js.stream_info(name)
            exists = True
        except nats.js.errors.NotFoundError:
            exists = False
        await (js.update_stream(config) if exists else js.add_stream(config))
    return list(subjects.streams())


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
