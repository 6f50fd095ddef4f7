"""Published-step records (alignment/records.py) without NATS: a step not published yet costs one KV read of its
old per-step key, not one for every piece of it that comes."""

import json

from mgrpo_actors.alignment.records import FORGOTTEN, PublishedRecords


class CountingKv:
    def __init__(self, entries=None):
        self.entries, self.gets = dict(entries or {}), []

    def get(self, key):
        self.gets.append(key)
        return self.entries.get(key)

    def put(self, key, value):
        self.entries[key] = value


def test_an_unpublished_steps_old_key_is_read_once_for_all_its_pieces():
    kv = CountingKv()
    records = PublishedRecords(kv, "sub")
    assert kv.gets == ["aligned.sub.recent"]
    assert all(records.get(5) is None for _ in range(64))  # a step's 64 trajectories and statistics
    assert kv.gets == ["aligned.sub.recent", "aligned.sub.5"]
    records.put(5, {"batch_id": "b5", "num_samples": 4, "num_chunks": 1})
    assert json.loads(records.get(5))["batch_id"] == "b5"  # published now: from the record, no read


def test_an_old_key_that_is_there_is_found_every_time():
    kv = CountingKv({"aligned.main.2": json.dumps({"batch_id": "b2", "num_samples": 4, "num_chunks": 1}).encode()})
    records = PublishedRecords(kv, "main")
    assert all(json.loads(records.get(2))["batch_id"] == "b2" for _ in range(3))


def test_steps_found_absent_are_bounded_and_old_ones_still_read_as_forgotten():
    kv = CountingKv()
    records = PublishedRecords(kv, "main", keep=4)
    for step in range(100):
        assert records.get(step) is None
    assert len(records.unsaved) == 16  # 4 x keep: the newest absent steps
    for step in range(100, 104):
        records.put(step, {"batch_id": f"b{step}", "num_samples": 1, "num_chunks": 1})
    assert json.loads(records.get(3)) == FORGOTTEN  # long out of flight: late, whether read again or not
    assert json.loads(records.get(99)) == FORGOTTEN
