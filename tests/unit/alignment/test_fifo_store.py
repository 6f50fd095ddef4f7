"""The ablation's queue in the sub aligner's KV state (alignment/fifo_store.py; docs/method.md §Training schedule,
docs/architecture.md §Delivery and state): a restarted aligner goes on with the queue of the last step recorded as
published, or with the queue an unrecorded step was taken from (the step is then built again from it); a committed
step's predecessor queue is deleted; a queue too big for one value is cut into chunks."""

from types import SimpleNamespace

import numpy as np
import pytest

from actors.sub_aligner import SubAlignerActor
from mgrpo_actors.alignment.fifo_queue import FifoQueue
from mgrpo_actors.alignment.fifo_store import HEAD_KEY, QueueStore, chunk_key, head_key
from protocols import AlignedBatch, decode
from tests.unit.alignment.test_fifo import build

MAX_BYTES = 64 * 1024 + 100  # beyond the chunk overhead, room for one of these small samples per chunk


class Kv:
    """A KV bucket as a dict."""

    def __init__(self):
        self.values: dict[str, bytes] = {}

    def get(self, key):
        return self.values.get(key)

    def put(self, key, value):
        assert isinstance(value, bytes)
        self.values[key] = value

    def delete(self, key):
        self.values.pop(key, None)


def leftovers_of_step0():
    """Step 0 (B = 1, K = 2, D = 2: 4 slots) with 7 calls: t4, t5, t6 are left."""
    arrivals = [("q1", 0, 1), ("q1", 1, 0)] * 3 + [("q1", 0, 1)]
    return build(0, FifoQueue(), arrivals)[2]


def committed(kv, left, run_id="run", side="sub"):
    store = QueueStore(kv, MAX_BYTES, side=side)
    store.save(left, run_id)
    store.advance(left)
    return store


def test_a_restored_queue_builds_the_same_next_batch():
    kv, left = Kv(), leftovers_of_step0()
    committed(kv, left)
    assert kv.get(chunk_key(0, 2)) is not None and kv.get(chunk_key(0, 3)) is None  # 3 rows, a chunk each
    restored = QueueStore(kv, MAX_BYTES)
    restored.restore(published=lambda step: step == 0)
    assert restored.queue.step == 0
    assert [r.sample_id for r in restored.queue.rows] == [r.sample_id for r in left.rows]
    as_kept, _, _ = build(1, left, [("q1", 0, 0)])
    as_restored, _, _ = build(1, restored.queue, [("q1", 0, 0)])
    assert as_restored.sample_ids == as_kept.sample_ids
    for name in ("token_ids", "loss_mask", "logprobs", "advantages", "rewards", "policy_versions", "temperatures"):
        np.testing.assert_array_equal(getattr(as_restored, name), getattr(as_kept, name), err_msg=name)


def test_a_step_saved_but_not_recorded_is_built_again_from_the_queue_it_took_from():
    kv, left0 = Kv(), leftovers_of_step0()
    store = committed(kv, left0)
    _, _, left1 = build(1, store.queue, [("q1", 0, 0)] * 3)  # takes t4 t5 t6 and one of its own, leaves 2
    store.save(left1, "run")  # then the aligner dies before step 1's record
    again = QueueStore(kv, MAX_BYTES)
    again.restore(published=lambda step: step == 0)
    assert again.queue.step == 0 and [r.sample_id for r in again.queue.rows] == [r.sample_id for r in left0.rows]
    # Recorded after all: step 1's queue is the one to go on with.
    later = QueueStore(kv, MAX_BYTES)
    later.restore(published=lambda step: step <= 1)
    assert later.queue.step == 1 and len(later.queue.rows) == 2


def test_nothing_saved_or_nothing_committed_starts_empty():
    kv = Kv()
    store = QueueStore(kv, MAX_BYTES)
    store.restore(published=lambda step: True)
    assert store.queue == FifoQueue() and store.saved is None
    store.save(leftovers_of_step0(), "run")  # step 0, the first, never recorded
    store2 = QueueStore(kv, MAX_BYTES)
    store2.restore(published=lambda step: False)
    assert store2.queue == FifoQueue()


def test_committing_a_step_deletes_the_queue_it_was_taken_from():
    kv, left0 = Kv(), leftovers_of_step0()
    store = committed(kv, left0)
    _, _, left1 = build(1, store.queue, [("q1", 0, 0)] * 5)
    store.save(left1, "run")
    store.advance(left1)
    assert [k for k in kv.values if k.startswith("fifo.sub.0.")] == []
    assert sorted(k for k in kv.values if k != HEAD_KEY) == [chunk_key(1, i) for i in range(len(left1.rows))]


def test_a_missing_chunk_is_an_error_not_a_shorter_queue():
    kv = Kv()
    committed(kv, leftovers_of_step0())
    del kv.values[chunk_key(0, 1)]
    with pytest.raises(LookupError, match="fifo.sub.0.1"):
        QueueStore(kv, MAX_BYTES).restore(published=lambda step: True)


def test_the_default_types_keys_are_those_it_had_alone():
    assert HEAD_KEY == head_key() == head_key("sub") == "fifo.sub.head"
    assert chunk_key(3, 1) == chunk_key(3, 1, "sub") == "fifo.sub.3.1"
    kv = Kv()
    committed(kv, leftovers_of_step0())
    assert sorted(kv.values) == ["fifo.sub.0.0", "fifo.sub.0.1", "fifo.sub.0.2", "fifo.sub.head"]


def test_a_types_queue_is_saved_under_its_own_keys():
    assert (head_key("calculator"), chunk_key(3, 1, "calculator")) == ("fifo.calculator.head", "fifo.calculator.3.1")
    kv = Kv()
    committed(kv, leftovers_of_step0(), side="calculator")
    assert sorted(kv.values) == [
        "fifo.calculator.0.0",
        "fifo.calculator.0.1",
        "fifo.calculator.0.2",
        "fifo.calculator.head",
    ]
    chunk = decode(kv.values["fifo.calculator.0.0"])
    assert isinstance(chunk, AlignedBatch) and chunk.side == "calculator"
    assert chunk.batch_id.startswith("run-calculator-queue0")


def test_each_type_restores_its_own_queue():
    kv, left = Kv(), leftovers_of_step0()
    calculator = committed(kv, left, side="calculator")
    _, _, left1 = build(1, calculator.queue, [("q1", 0, 0)] * 3)  # leaves 2
    calculator.save(left1, "run")
    calculator.advance(left1)
    committed(kv, left, side="searcher")  # a second type beside it: step 0's 3 rows
    restored = {side: QueueStore(kv, MAX_BYTES, side=side) for side in ("calculator", "searcher", "sub")}
    for store in restored.values():
        store.restore(published=lambda step: True)
    assert (restored["calculator"].queue.step, len(restored["calculator"].queue.rows)) == (1, 2)
    assert [r.sample_id for r in restored["searcher"].queue.rows] == [r.sample_id for r in left.rows]
    assert restored["sub"].queue == FifoQueue()  # the default type saved nothing
    assert not [key for key in kv.values if key.startswith("fifo.calculator.0.")]  # only the calculator's step 0


def test_the_sub_aligner_builds_one_step_at_a_time_from_the_queue():
    # Step 3 was built and its publish failed (retried on a tick): step 4 must not take the same queued samples.
    waiting = SimpleNamespace(holding=SimpleNamespace(steps={3: SimpleNamespace(result=FifoQueue()), 4: None}))
    with pytest.raises(RuntimeError, match="step 4 waits for step 3"):
        SubAlignerActor._one_step_per_queue(waiting, SimpleNamespace(step=4))
    alone = SimpleNamespace(holding=SimpleNamespace(steps={3: SimpleNamespace(result=None)}))
    SubAlignerActor._one_step_per_queue(alone, SimpleNamespace(step=4))
