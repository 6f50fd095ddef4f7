"""Which failures of a write into the NATS server's JetStream store mean the store is full (runtime/store_full.py),
what the one line says, and that the run is stopped once. The real nats-server's answers: tests/integration/
test_disk_full.py."""

from __future__ import annotations

import shutil
from collections import namedtuple

import nats.errors
import nats.js.errors
import pytest

from mgrpo_actors.runtime import is_transient
from mgrpo_actors.runtime.errors import BusError
from mgrpo_actors.runtime.store_full import StoreFull, StoreWatch, store_full

URL = "nats://10.0.0.1:4222"
Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def free_bytes(monkeypatch):
    """free_bytes(n): the store's device (any path) has `n` bytes free of 10 GB."""

    def set_free(free: int) -> None:
        monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**10, 10**10 - free, free))

    return set_free


def _api_error(err_code: int, description: str, code: int = 503) -> nats.js.errors.APIError:
    return nats.js.errors.APIError(code=code, err_code=err_code, description=description)


def test_the_servers_storage_limit_reached_is_a_full_store_named_by_its_path(tmp_path):
    full = store_full(
        _api_error(10023, "insufficient resources"), "a publish to mgrpo.r.traj.main", store_dir=tmp_path, where=URL
    )
    assert isinstance(full, StoreFull) and isinstance(full, BusError) and full.store == str(tmp_path)
    assert str(full) == (
        f"the NATS server's JetStream store is full: no space left within its storage limit in {tmp_path} "
        "(nats-server: insufficient resources, err_code 10023, on a publish to mgrpo.r.traj.main); "
        "free space there and continue with --resume"
    )


@pytest.mark.parametrize(
    ("err_code", "description"),
    [
        (10047, "insufficient storage resources available"),
        (10002, "resource limits exceeded for account"),  # an account's own storage limit
        (
            10077,
            "write /data/js/jetstream/$G/streams/s/msgs/1.blk: no space left on device",
        ),  # the OS's error passed on
    ],
)
def test_the_other_answers_of_a_store_without_room_are_a_full_store(tmp_path, err_code, description):
    full = store_full(_api_error(err_code, description), "KV put b/k", store_dir=tmp_path, where=URL)
    assert full is not None and f"err_code {err_code}" in str(full) and str(tmp_path) in str(full)


@pytest.mark.parametrize(
    "exc",
    [
        _api_error(10077, "maximum messages exceeded"),  # a stream's own cap: its publishers retry, work is not lost
        _api_error(10077, "maximum bytes exceeded"),
        _api_error(10071, "wrong last sequence: 4", code=400),
        nats.js.errors.NoStreamResponseError(),
        nats.errors.ConnectionClosedError(),
        ValueError("not a bus error at all"),
    ],
)
def test_other_failures_are_not_a_full_store(tmp_path, free_bytes, exc):
    free_bytes(0)  # even on a full device: only a write the server left unanswered counts then
    assert store_full(exc, "a publish to s", store_dir=tmp_path, where=URL) is None


def test_a_server_elsewhere_is_named_by_its_url_and_its_timeouts_are_not_judged(free_bytes):
    full = store_full(_api_error(10023, "insufficient resources"), "a publish to s", store_dir=None, where=URL)
    assert str(full) == (
        f"the NATS server's JetStream store is full: no space left within its storage limit in the server at {URL} "
        "(nats-server: insufficient resources, err_code 10023, on a publish to s)"
    )
    free_bytes(0)  # this machine's disk says nothing of that server's
    assert store_full(nats.errors.TimeoutError(), "a publish to s", store_dir=None, where=URL) is None


@pytest.mark.parametrize("timeout", [nats.errors.TimeoutError(), TimeoutError()])
def test_an_unanswered_write_on_a_full_device_is_a_full_store(tmp_path, free_bytes, timeout):
    """nats-server does not answer a publish it could not write for want of space: the timeout is all a publisher
    sees, and the device of the store (known to the process that started the server) tells why."""
    free_bytes(4096)
    full = store_full(timeout, "a publish to mgrpo.r.traj.main", store_dir=tmp_path, where=URL)
    assert str(full) == (
        f"the NATS server's JetStream store is full: no space left on device in {tmp_path} "
        "(a publish to mgrpo.r.traj.main got no answer); free space there and continue with --resume"
    )


def test_an_unanswered_write_is_a_full_store_only_when_the_device_has_no_room_for_it(tmp_path, free_bytes):
    free_bytes(2 * 1024**3)
    assert store_full(TimeoutError(), "a publish to s", store_dir=tmp_path, where=URL, size=1_000_000) is None
    free_bytes(100 * 1024**2)  # room in general, but not for this message
    assert store_full(TimeoutError(), "a publish to s", store_dir=tmp_path, where=URL, size=200 * 1024**2)


def test_the_watch_stops_the_run_once_and_hands_the_full_store_on_as_a_passing_bus_failure(tmp_path, free_bytes):
    stopped: list[str] = []
    watch = StoreWatch(tmp_path, URL, stopped.append)
    free_bytes(0)
    for _ in range(2):
        with pytest.raises(StoreFull) as raised, watch.writing("a publish to s", 10):
            raise nats.errors.TimeoutError
        assert isinstance(raised.value.__cause__, nats.errors.TimeoutError)
        assert is_transient(raised.value)  # the actor hands its delivery back: nothing is acknowledged
    assert stopped == [str(raised.value)] and watch.full is not None  # said and stopped once
    with pytest.raises(nats.errors.ConnectionClosedError), watch.writing("a publish to s"):
        raise nats.errors.ConnectionClosedError  # anything else leaves as it came
    inner = StoreFull("/s", "no space left on device", "a chunk got no answer")
    with pytest.raises(StoreFull) as raised, watch.writing("an object"):
        raise inner  # a write within a write: the inner one's, as it is
    assert raised.value is inner and raised.value.__cause__ is None
    with watch.writing("a publish to s"):
        pass


def test_a_watch_without_a_store_or_a_run_to_stop_still_says_the_servers_refusal():
    with pytest.raises(StoreFull, match="in the server at "), StoreWatch().writing("KV put b/k"):
        raise _api_error(10023, "insufficient resources")
