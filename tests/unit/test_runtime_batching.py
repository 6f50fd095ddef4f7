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
