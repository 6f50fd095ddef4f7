"""An aligner's published-step records (alignment/records.py) in a real KV bucket: one key holds the newest
steps' records however many steps went by, a restarted aligner reads them back, and a record an earlier run kept
under its own key (`aligned.<side>.<step>`) still counts."""

from __future__ import annotations

import json

import pytest

from mgrpo_actors.alignment.records import PublishedRecords

pytestmark = pytest.mark.integration


def _record(step: int) -> dict:
    return {"batch_id": f"b{step}", "num_samples": 4, "num_chunks": 1}


def test_the_newest_records_in_one_key_read_back_after_a_restart(bus):
    kv = bus.kv(bus.subjects.bucket("state-main"))
    records = PublishedRecords(kv, "main", keep=8)
    for step in range(20):
        records.put(step, _record(step))
    info = bus.stream_info(f"KV_{bus.subjects.bucket('state-main')}")
    assert info.state.messages == 1  # one entry, not one per step
    again = PublishedRecords(kv, "main", keep=8)  # a restarted aligner
    assert [json.loads(again.get(step)) for step in range(12, 20)] == [_record(step) for step in range(12, 20)]
    assert again.get(20) is None


def test_a_record_an_earlier_run_kept_under_its_own_key_still_counts(bus):
    kv = bus.kv(bus.subjects.bucket("state-sub"))
    kv.put("aligned.sub.3", json.dumps(_record(3)).encode())
    records = PublishedRecords(kv, "sub")
    assert json.loads(records.get(3)) == _record(3) and records.get(4) is None


def test_a_step_older_than_a_full_window_reads_as_published_and_a_failed_put_commits_nothing(bus):
    """A piece of a step published long ago must count as late (a held step without a plan would keep its
    delivery unacked for ever); a put that fails leaves the step unpublished, to publish again."""
    from mgrpo_actors.alignment.records import FORGOTTEN

    kv = bus.kv(bus.subjects.bucket("state-main"))
    records = PublishedRecords(kv, "main", keep=4)
    assert records.get(0) is None  # nothing published yet: a step to hold
    for step in range(10):
        records.put(step, _record(step))
    assert json.loads(records.get(2)) == FORGOTTEN and records.get(10) is None

    bus.call(bus._js.delete_stream(f"KV_{bus.subjects.bucket('state-main')}"))  # the bucket is gone: puts fail
    with pytest.raises(Exception):  # noqa: B017 (whatever nats.py raises for it)
        records.put(10, _record(10))
    assert records.get(10) is None and json.loads(records.get(9)) == _record(9)
