"""The learner's bookkeeping (learner/ordering.py), docs/architecture.md §One training step, step 6 and
§Delivery and state: chunks gathered in any order into whole batches, a repeated chunk ignored, a step applied
before never applied again, whole batches applied in step order with no gap, the version a step applied before
made, the record a restarted learner resumes from, and acks only with every checkpoint_every-th batch."""

from types import SimpleNamespace

import pytest

from mgrpo_actors.learner.ordering import AckSchedule, Arrival, BatchAssembler, resumed_record, step_version


def chunk(step, index=0, of=1):
    """An AlignedBatch chunk's bookkeeping fields."""
    return SimpleNamespace(step=step, batch_id=f"run-main-step{step}", chunk=index, num_chunks=of)


def test_chunks_in_any_order_make_a_whole_batch():
    batches = BatchAssembler()
    assert batches.add(chunk(0, 2, of=3), "d2", applied_step=-1) is Arrival.HELD
    assert batches.add(chunk(0, 0, of=3), "d0", applied_step=-1) is Arrival.HELD
    assert batches.next_due(-1) is None  # not whole yet
    assert batches.add(chunk(0, 1, of=3), "d1", applied_step=-1) is Arrival.COMPLETE
    batch_id, held = batches.next_due(-1)
    assert batch_id == "run-main-step0"
    assert [(c.chunk, d) for c, d in held] == [(2, "d2"), (0, "d0"), (1, "d1")]  # as they came
    assert batches.chunks == {} and batches.complete == {} and batches.next_due(-1) is None


def test_a_repeated_chunk_is_ignored():
    batches = BatchAssembler()
    assert batches.add(chunk(0, 0, of=2), "first", applied_step=-1) is Arrival.HELD
    assert batches.add(chunk(0, 0, of=2), "redelivered", applied_step=-1) is Arrival.DUPLICATE
    assert [d for _, d in batches.chunks["run-main-step0"]] == ["first"]
    assert batches.add(chunk(0, 1, of=2), "second", applied_step=-1) is Arrival.COMPLETE
    # whole but waiting: a repeat is still a duplicate, not a new batch
    assert batches.add(chunk(0, 1, of=2), "again", applied_step=-1) is Arrival.DUPLICATE


def test_a_step_applied_before_is_not_held():
    batches = BatchAssembler()
    assert batches.add(chunk(3), "d", applied_step=3) is Arrival.APPLIED_BEFORE
    assert batches.add(chunk(1), "d", applied_step=3) is Arrival.APPLIED_BEFORE
    assert batches.chunks == {} and batches.complete == {}
    assert batches.add(chunk(4), "d", applied_step=3) is Arrival.COMPLETE


def apply_due(batches, applied_step):
    """The learner's loop: apply every due batch in turn."""
    applied = []
    while (due := batches.next_due(applied_step)) is not None:
        applied.append(due[0])
        applied_step += 1
    return applied, applied_step


def test_whole_batches_are_applied_in_step_order():
    batches = BatchAssembler()
    assert batches.add(chunk(2), "d2", applied_step=-1) is Arrival.COMPLETE
    assert batches.add(chunk(1, 1, of=2), "d1b", applied_step=-1) is Arrival.HELD
    assert batches.add(chunk(1, 0, of=2), "d1a", applied_step=-1) is Arrival.COMPLETE
    assert apply_due(batches, -1) == ([], -1)  # step 0's batch is not here: 1 and 2 wait
    assert batches.waiting() == [1, 2]
    assert batches.add(chunk(0), "d0", applied_step=-1) is Arrival.COMPLETE
    assert apply_due(batches, -1) == (["run-main-step0", "run-main-step1", "run-main-step2"], 2)
    assert batches.waiting() == []


def test_a_batch_handed_back_is_gathered_again():
    batches = BatchAssembler()
    batches.add(chunk(0, 0, of=2), "d0", applied_step=-1)
    batches.add(chunk(0, 1, of=2), "d1", applied_step=-1)
    assert batches.next_due(-1)[0] == "run-main-step0"  # applying it failed: its chunks are nak'ed
    assert batches.add(chunk(0, 1, of=2), "d1 again", applied_step=-1) is Arrival.HELD
    assert batches.add(chunk(0, 0, of=2), "d0 again", applied_step=-1) is Arrival.COMPLETE
    assert [d for _, d in batches.next_due(-1)[1]] == ["d1 again", "d0 again"]


@pytest.mark.parametrize(("step", "version"), [(5, 9), (4, 8), (0, 4)])
def test_a_step_applied_before_made_the_version_its_place_says(step, version):
    assert step_version({"step": 5, "batch_id": "b5", "version": 9, "history": []}, step) == version


def test_the_record_a_learner_resumes_from():
    fresh = {"step": -1, "batch_id": "", "version": 0, "history": []}
    assert resumed_record(None, None) == fresh
    saved = {"step": 2, "batch_id": "b2", "version": 3}  # an older record without history
    assert resumed_record(saved, None) == {"history": [], **saved}
    assert resumed_record(saved, (2, 3)) == {"history": [], **saved}  # announced what it recorded
    # announced version 4 (step 3), then died before recording: step 3 was applied
    assert resumed_record(saved, (3, 4)) == {"step": 3, "batch_id": "", "version": 4, "history": []}
    assert resumed_record(None, (0, 1)) == {"step": 0, "batch_id": "", "version": 1, "history": []}


def acked_after_each(every, batches):
    acks, acked = AckSchedule(every), []
    for n in range(1, batches + 1):
        acks.hold([f"b{n}.0", f"b{n}.1"])
        acked.append(acks.release() if acks.due(n) else [])
    return acked, acks.unacked


def test_without_checkpoints_every_batch_is_acked_once_applied():
    acked, left = acked_after_each(0, 2)
    assert acked == [["b1.0", "b1.1"], ["b2.0", "b2.1"]] and left == []


def test_with_checkpoints_batches_are_acked_with_every_checkpoint_every_th():
    acked, left = acked_after_each(3, 7)
    assert acked == [
        [],
        [],
        ["b1.0", "b1.1", "b2.0", "b2.1", "b3.0", "b3.1"],
        [],
        [],
        ["b4.0", "b4.1", "b5.0", "b5.1", "b6.0", "b6.1"],
        [],
    ]
    assert left == ["b7.0", "b7.1"]  # waits for the next checkpoint (or is redelivered after a crash)


def test_acks_count_every_applied_batch_of_the_run():
    acks = AckSchedule(2)
    acks.hold(["b5"])
    assert acks.due(5) is False  # a resumed learner: the 5th batch of the run
    acks.hold(["b6"])
    assert acks.due(6) is True and acks.release() == ["b5", "b6"] and acks.release() == []


def test_the_applied_record_counts_every_batch_but_keeps_only_the_newest_ids():
    """The record is in KV and in every checkpoint: it must not grow by an id a step for the whole run."""
    from mgrpo_actors.learner.ordering import HISTORY, applied_count, next_record

    record = resumed_record(None, None)
    for step in range(HISTORY + 10):
        record = next_record(record, step, f"b{step}", step + 1)
    assert applied_count(record) == HISTORY + 10 and record["version"] == HISTORY + 10
    assert record["history"] == [f"b{s}" for s in range(10, HISTORY + 10)]
    old = {"step": 2, "batch_id": "b2", "version": 3, "history": ["b0", "b1", "b2"]}  # a record of before
    assert applied_count(old) == 3 and applied_count(next_record(old, 3, "b3", 4)) == 4
