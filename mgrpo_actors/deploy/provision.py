"""Make a run's streams, KV buckets and object stores ahead of its nodes (`mgrpo deploy provision`), as
the deployment's admin user: under the rendered permissions no role may create any of them (a user
that may create a stream can create one that sources another and read it), so nodes only look them
up. The limits and replicas are the node config's (nats.stream_max_msgs, stream_max_age_s, replicas)."""

from __future__ import annotations

from mgrpo_actors.runtime import Bus, StreamLimits
from protocols import SIDES

__all__ = ["RUN_BUCKETS", "provision_run", "weights_buckets"]

# KV: the controller's cursor; each side's run state for resume (aligner, learner); each side's newest weights.
RUN_BUCKETS = ("state", "state-main", "state-sub", "versions-main", "versions-sub")


def weights_buckets() -> list[str]:
    """Short names of the object stores weights travel through, one per side."""
    return [f"weights-{side}" for side in SIDES]


def provision_run(bus: Bus, limits: StreamLimits) -> dict[str, list[str]]:
    """Create what is missing of the bus's run; returns what exists now, by kind."""
    streams = bus.ensure_streams(None, limits)
    for what in RUN_BUCKETS:
        bus.kv(bus.subjects.bucket(what))
    for what in weights_buckets():
        bus.object_store(bus.subjects.bucket(what))
    return {"streams": streams, "kv": [bus.subjects.bucket(w) for w in RUN_BUCKETS], "objects": [bus.subjects.bucket(w) for w in weights_buckets()]}
