"""JetStream KV buckets through the Bus on a real nats-server: put/get/delete/keys, messages as values,
and watch() delivering KvUpdate into an actor's mailbox."""

from __future__ import annotations

import threading

import pytest

from mgrpo_actors.runtime import BusActor, KvUpdate
from protocols import WeightsVersion, decode
from tests.helpers import wait_until

pytestmark = pytest.mark.integration


def test_put_get_delete_keys(bus):
    kv = bus.kv(bus.subjects.bucket("state"))
    assert kv.keys() == []
    assert kv.get("missing") is None
    rev1 = kv.put("step", b"1")
    rev2 = kv.put("step", b"2")
    assert isinstance(rev1, int) and rev2 > rev1
    assert kv.get("step") == b"2"
    kv.put("other", b"")
    assert sorted(kv.keys()) == ["other", "step"]
    kv.delete("step")
    assert kv.get("step") is None
    assert kv.keys() == ["other"]


def test_a_bucket_reads_with_the_bus_record_of_refusals(bus):
    # A refused read is then said at once (a BusError) instead of waited out over every attempt (~29 s).
    assert bus.kv(bus.subjects.bucket("state")).denials is bus._api_denials


def test_messages_as_values_and_reopening_a_bucket(bus, make_bus):
    name = bus.subjects.bucket("weights")
    kv = bus.kv(name)
    version = WeightsVersion(run_id=bus.run_id, side="sub", version=3, step=2, uri="file:///w/3", sha256="ab")
    kv.put("sub", version)
    same_bucket_elsewhere = make_bus("reader").kv(name)  # opens the existing bucket, does not recreate it
    assert decode(same_bucket_elsewhere.get("sub")) == version


class Watcher(BusActor):
    role = "test"

    def __init__(self, bus, updates: list) -> None:
        super().__init__(bus)
        self.updates = updates

    def on_kv_update(self, update: KvUpdate) -> None:
        self.updates.append((update, threading.current_thread().name))


def test_watch_delivers_updates_into_an_actor(bus, actors):
    kv = bus.kv(bus.subjects.bucket("stats"))
    kv.put("q0.r0", b"before-watch")
    updates: list = []
    ref = Watcher.start_ready(bus, updates)
    actors.append(ref)
    stop = kv.watch("q0.*", ref)
    kv.put("q0.r1", b"a")
    kv.put("q0.r0", b"b")
    kv.put("elsewhere", b"not watched")
    kv.delete("q0.r1")
    wait_until(lambda: len(updates) >= 4, what=lambda: f"updates {updates}")
    got = [(u.key, u.value, u.operation) for u, _ in updates]
    # The current value of an existing key first, then every change in order; deletes carry no value.
    assert got == [
        ("q0.r0", b"before-watch", "PUT"),
        ("q0.r1", b"a", "PUT"),
        ("q0.r0", b"b", "PUT"),
        ("q0.r1", None, "DEL"),
    ]
    assert all(u.bucket == bus.subjects.bucket("stats") for u, _ in updates)
    revisions = [u.revision for u, _ in updates]
    assert revisions == sorted(revisions) and revisions[0] > 0
    assert all(not thread.startswith("nats-bus") for _, thread in updates)  # handled in the actor's thread
    stop()
