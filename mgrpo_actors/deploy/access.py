"""What a role may do on NATS, declared once per role (actors/roles.py puts one `RoleAccess` beside each
role) and rendered into the subject permissions of that role's NATS user for a run (`permissions`).

A declaration names the run's subjects relative to `mgrpo.<run>.` ("traj.main", "tool.*"), the run's
streams, KV buckets and object stores by the short names `Subjects.stream` / `Subjects.bucket` take
("traj-main", "state", "weights-main"), and durable consumers by name. Rendering turns each into what
nats-py actually sends (checked against a traced nats-server: JetStream API, ack, KV and object-store
subjects), for one run id: stream and bucket names hold the run id inside a token, where no NATS
wildcard reaches, so permissions are written per run.

What every node does whatever its role (answer pings, publish events, metrics and dead letters, take
replies on its own inbox) is added to each role by `permissions`.

No role may create a stream or bucket: the admin user makes them beforehand (`mgrpo deploy
provision`), and nodes only look them up (the runtime creates a stream only when the lookup says it
is missing). A user allowed to create a stream can create one that *sources* another and read it
through the copy (measured on nats-server 2.15), whatever else its permissions say.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocols import Subjects
from protocols.durables import is_work_durable

__all__ = ["Permissions", "RoleAccess", "common_access", "permissions", "replay_api", "subject_matches"]


@dataclass(frozen=True)
class RoleAccess:
    """What one role's processes touch on NATS (names relative to the run, see the module doc)."""

    account: str = ""  # its user's NATS account (deploy/accounts.py: MAIN, SUB or SUB_<TYPE>, TOOLS, MONITOR)
    publish: tuple[str, ...] = ()  # core and JetStream publishes (js_publish needs a PubAck: on the inbox)
    requests: tuple[str, ...] = ()  # subjects it sends requests on (the replies come to its inbox)
    subscribe: tuple[str, ...] = ()  # plain or queue-group subscriptions
    streams: tuple[str, ...] = ()  # streams it looks up (made beforehand by `mgrpo deploy provision`)
    durables: tuple[
        tuple[str, str], ...
    ] = ()  # (stream, durable) pull consumers it binds to, pulls and acks (made by provision)
    replays: tuple[str, ...] = ()  # streams it reads by direct gets (runtime/stream_reader.py: no consumer)
    kv_read: tuple[str, ...] = ()  # KV buckets it opens and reads
    kv_write: tuple[tuple[str, str], ...] = ()  # (bucket, key or key pattern) it puts
    objects_read: tuple[str, ...] = ()  # object stores it opens and reads
    objects_write: tuple[str, ...] = ()  # object stores it writes (put, replace, delete)


@dataclass(frozen=True)
class Permissions:
    """The publish and subscribe allow lists of one NATS user (nats-server `permissions`)."""

    publish: list[str] = field(default_factory=list)
    subscribe: list[str] = field(default_factory=list)

    def may_publish(self, subject: str) -> bool:
        return any(subject_matches(pattern, subject) for pattern in self.publish)

    def may_subscribe(self, subject: str) -> bool:
        return any(subject_matches(pattern, subject) for pattern in self.subscribe)

    def merged(self, other: Permissions) -> Permissions:
        return Permissions(
            list(dict.fromkeys([*self.publish, *other.publish])),
            list(dict.fromkeys([*self.subscribe, *other.subscribe])),
        )


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, a final `>` one or more."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def common_access(until_finished: bool = True) -> RoleAccess:
    """Every node: events and metrics out, dead letters, node pings answered, the run's end heard."""
    return RoleAccess(
        publish=("events", "metrics.>", "dlq.>"),
        subscribe=("node.ping", *(("events",) if until_finished else ())),
        streams=("metrics", "dlq"),
    )


def _stream_api(stream: str) -> list[str]:
    return [f"$JS.API.STREAM.INFO.{stream}"]


def _durable_api(stream: str, durable: str) -> list[str]:
    # Bind (info), pull and ack; never create or update: the admin makes the durables at provision time
    # (protocols/durables.py says why), and nats-py binds to one that exists. The one reader of a work stream
    # also removes what it acknowledged (runtime/retention.py): no more than acking everything could do.
    purge = [f"$JS.API.STREAM.PURGE.{stream}"] if is_work_durable(durable) else []
    return [
        f"$JS.API.CONSUMER.INFO.{stream}.{durable}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
        *purge,
    ]


def replay_api(stream: str) -> list[str]:
    """Reading `stream` by direct gets (runtime/stream_reader.py), one message gets where the stream has no direct
    gets."""
    return [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}"]


def _kv_read_api(bucket: str) -> list[str]:
    stream = f"KV_{bucket}"
    return [
        *_stream_api(stream),
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
    ]


def _objects_read_api(bucket: str) -> list[str]:
    # runtime/objects.read_object: the object's meta entry by message get, its chunks by batched direct gets
    # (message gets where those do not answer), no consumer (a user that may create consumers can have the
    # server deliver a stream's messages anywhere).
    stream = f"OBJ_{bucket}"
    return [*_stream_api(stream), f"$JS.API.STREAM.MSG.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}"]


def permissions(access: RoleAccess, run_id: str, inbox_prefix: str, until_finished: bool = True) -> Permissions:
    """The allow lists of a user with `access` (plus `common_access`) in run `run_id`, whose
    connection takes replies on `inbox_prefix` (nats.auth.inbox_prefix). Replies to requests it
    received go out through the server's `allow_responses`, not through a publish permission."""
    s = Subjects(run_id)
    every = common_access(until_finished)
    pub: list[str] = []
    sub: list[str] = [f"{inbox_prefix}.>"]
    for role in (every, access):
        pub += [f"{s.root}.{rel}" for rel in (*role.publish, *role.requests)]
        sub += [f"{s.root}.{rel}" for rel in role.subscribe]
        for what in role.streams:
            pub += _stream_api(s.stream(what))
        for what, durable in role.durables:
            pub += [*_stream_api(s.stream(what)), *_durable_api(s.stream(what), durable)]
        for what in role.replays:
            pub += replay_api(s.stream(what))
        for what in role.kv_read:
            pub += _kv_read_api(s.bucket(what))
        for what, key in role.kv_write:
            pub += [*_kv_read_api(s.bucket(what)), f"$KV.{s.bucket(what)}.{key}"]
        for what in role.objects_read:
            pub += _objects_read_api(s.bucket(what))
        for what in role.objects_write:
            bucket = s.bucket(what)
            pub += [*_objects_read_api(bucket), f"$O.{bucket}.>", f"$JS.API.STREAM.PURGE.OBJ_{bucket}"]
    return Permissions(list(dict.fromkeys(pub)), list(dict.fromkeys(sub)))
