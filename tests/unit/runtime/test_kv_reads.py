"""KV reads are asked again after a JetStream API timeout: on a three-server cluster a bucket just made may not
answer its first get within nats-py's 5 s, and an aligner that read its records in on_start died of that (CI)."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from mgrpo_actors.runtime import jetstream
from mgrpo_actors.runtime.errors import BusError
from mgrpo_actors.runtime.kv import KvBucket
from mgrpo_actors.runtime.loop import BusLoop


class _Entry:
    def __init__(self, value: bytes) -> None:
        self.value = value


class _SlowThenReadyKv:
    """nats-py's KeyValue surface that KvBucket reads, timing out `timeouts` times before it answers."""

    def __init__(self, timeouts: int, values: dict[str, bytes]) -> None:
        self.timeouts, self.values, self.calls = timeouts, values, 0

    async def _maybe_time_out(self) -> None:
        self.calls += 1
        if self.calls <= self.timeouts:
            raise nats.errors.TimeoutError

    async def get(self, key: str) -> _Entry:
        await self._maybe_time_out()
        if key not in self.values:
            raise nats.js.errors.KeyNotFoundError
        return _Entry(self.values[key])

    async def keys(self) -> list[str]:
        await self._maybe_time_out()
        if not self.values:
            raise nats.js.errors.NoKeysError
        return list(self.values)


@pytest.fixture
def loop(monkeypatch):
    monkeypatch.setattr(jetstream, "API_PAUSE_S", 0.0)
    bus_loop = BusLoop("kv-test", "kv test")
    bus_loop.start()
    yield bus_loop
    bus_loop.stop()


def test_a_get_that_times_out_twice_is_answered_on_the_third_try(loop):
    kv = _SlowThenReadyKv(timeouts=2, values={"aligned.main.recent": b"{}"})
    bucket = KvBucket(loop, "state-main", kv, max_bytes=1 << 20)
    assert bucket.get("aligned.main.recent") == b"{}"
    assert kv.calls == 3


def test_a_missing_key_is_none_after_a_timeout(loop):
    kv = _SlowThenReadyKv(timeouts=1, values={})
    assert KvBucket(loop, "state-main", kv, max_bytes=1 << 20).get("absent") is None
    assert kv.calls == 2


def test_keys_are_read_again_after_a_timeout(loop):
    kv = _SlowThenReadyKv(timeouts=1, values={"a": b"1", "b": b"2"})
    assert sorted(KvBucket(loop, "state-main", kv, max_bytes=1 << 20).keys()) == ["a", "b"]
    assert KvBucket(loop, "empty", _SlowThenReadyKv(timeouts=1, values={}), max_bytes=1 << 20).keys() == []


def test_a_get_that_always_times_out_fails_after_the_api_attempts(loop):
    kv = _SlowThenReadyKv(timeouts=10**6, values={})
    with pytest.raises(nats.errors.TimeoutError):
        KvBucket(loop, "state-main", kv, max_bytes=1 << 20).get("k")
    assert kv.calls == jetstream.API_ATTEMPTS


def test_a_get_the_server_refused_is_an_error_at_once(loop):
    denials = jetstream.ApiDenials()
    denials.record(Exception('nats: permissions violation for publish to "$js.api.direct.get.kv_state-main"'))
    kv = _SlowThenReadyKv(timeouts=10**6, values={})
    with pytest.raises(BusError, match="refused KV get state-main/k"):
        KvBucket(loop, "state-main", kv, max_bytes=1 << 20, denials=denials).get("k")
    assert kv.calls == 1
