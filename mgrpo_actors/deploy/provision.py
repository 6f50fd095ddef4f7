"""Make a run's streams, KV buckets, object stores and durable consumers ahead of its nodes (`mgrpo deploy
provision`), as the admin user of an account: under the rendered permissions no role may create any of
them (a user that may create a stream can create one that sources another and read it; one that may
create a consumer can have the server deliver messages onto any subject of its account), so nodes
only look them up and bind to them. With accounts (deploy/accounts.py) each account keeps its own, so
each account's admin provisions what the roles of that account use (`account_resources`). The limits
and replicas are the node config's (nats.stream_max_msgs, stream_max_age_s, replicas)."""

from __future__ import annotations

from mgrpo_actors.deploy.accounts import AccountResources
from mgrpo_actors.runtime import Bus, StreamLimits, ensure_durable
from protocols import DEFAULT_SUB_TYPE
from protocols.durables import durables
from protocols.subjects import sides_of

__all__ = ["RUN_BUCKETS", "everything", "provision_run", "run_buckets", "weights_buckets"]


def run_buckets(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> tuple[str, ...]:
    """Short names of a run's KV buckets: the controller's cursor; each side's run state for resume (aligner,
    learner); each side's newest weights version."""
    sides = sides_of(sub_types)
    return ("state", *(f"state-{side}" for side in sides), *(f"versions-{side}" for side in sides))


# The KV buckets of a run with the one default sub-agent type.
RUN_BUCKETS = run_buckets()


def weights_buckets(sub_types: tuple[str, ...] = (DEFAULT_SUB_TYPE,)) -> tuple[str, ...]:
    """Short names of the object stores weights travel through, one per side."""
    return tuple(f"weights-{side}" for side in sides_of(sub_types))


def everything(bus: Bus) -> AccountResources:
    """Every stream, KV bucket, object store and durable of the bus's run, for its sub-agent types (a server without
    accounts keeps them all in one)."""
    sub_types = bus.subjects.sub_types
    return AccountResources(
        tuple(bus.subjects.stream_names()),
        run_buckets(sub_types),
        weights_buckets(sub_types),
        tuple(durables(sub_types)),
    )


def provision_run(
    bus: Bus, limits: StreamLimits, ack_wait_s: float, resources: AccountResources | None = None
) -> dict[str, list[str]]:
    """Create what is missing of the bus's run (`resources` of its account; default `everything`), the
    durables with ack wait `ack_wait_s` (pipeline.ack_wait_s); returns what exists now, by kind."""
    resources = resources or everything(bus)
    streams = bus.ensure_streams(list(resources.streams), limits)
    for what in resources.kv:
        bus.kv(bus.subjects.bucket(what))
    for what in resources.objects:
        bus.object_store(bus.subjects.bucket(what))
    for name in resources.durables:
        spec = bus.durables[name]
        ensure_durable(bus, *spec.where(bus.subjects), ack_wait_s=ack_wait_s, max_ack_pending=spec.max_ack_pending)
    return {
        "streams": streams,
        "kv": [bus.subjects.bucket(w) for w in resources.kv],
        "objects": [bus.subjects.bucket(w) for w in resources.objects],
        "durables": list(resources.durables),
    }
