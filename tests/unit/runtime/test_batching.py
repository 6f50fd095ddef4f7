"""PendingBatch: requests that arrive while an actor is busy go together into its next batch."""

from mgrpo_actors.runtime import PendingBatch, RunBatch


def test_items_added_before_the_note_is_handled_form_one_batch_and_overflow_gets_its_own_note():
    notes: list = []
    pending: PendingBatch[int] = PendingBatch(notes.append, max_size=3)
    for item in range(5):
        pending.add(item)
    assert notes == [RunBatch()]  # one note for the whole burst
    assert pending.take() == [0, 1, 2]
    assert notes == [RunBatch(), RunBatch()]  # the two that did not fit are scheduled again
    assert pending.take() == [3, 4]
    assert pending.take() == [] and len(notes) == 2
    pending.add(5)
    assert len(notes) == 3 and pending.take() == [5]


def test_with_a_gather_window_the_note_waits_for_the_burst_unless_the_batch_is_full():
    import threading

    told = threading.Event()
    notes: list = []
    pending: PendingBatch[int] = PendingBatch(lambda note: (notes.append(note), told.set()), max_size=3, gather_s=1.0)
    pending.add(0)
    pending.add(1)
    assert notes == []  # the first request waits the gather window for the others of its step
    assert told.wait(5) and notes == [RunBatch()]
    assert pending.take() == [0, 1]
    for item in range(2, 5):
        pending.add(item)
    assert notes == [RunBatch(), RunBatch()]  # full at once: told without waiting
    assert pending.take() == [2, 3, 4]


def test_a_batch_of_one_is_never_delayed():
    notes: list = []
    pending: PendingBatch[int] = PendingBatch(notes.append, max_size=1, gather_s=10.0)
    pending.add(0)
    assert notes == [RunBatch()] and pending.take() == [0]
