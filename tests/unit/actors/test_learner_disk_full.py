"""A learner whose write after the optimizer step finds the disk full stops the run in one line (actors/learner.py):
the DiskFullError is found however the write wrapped it."""

from actors.learner import _disk_full_in
from mgrpo_actors.runtime.disk import DiskFullError, disk_full


def test_a_disk_full_error_is_found_through_the_errors_raised_from_it():
    full = disk_full("checkpoint step2", "/run/checkpoints/sub/step2")
    assert _disk_full_in(full) is full
    try:
        try:
            raise full
        except DiskFullError as inner:
            raise RuntimeError("checkpoint failed") from inner
    except RuntimeError as outer:
        assert _disk_full_in(outer) is full
    assert full.strerror == "no space left on device: checkpoint step2 not written to /run/checkpoints/sub/step2"


def test_other_failures_are_not_a_full_disk():
    assert _disk_full_in(RuntimeError("boom")) is None
    assert _disk_full_in(OSError(5, "input/output error")) is None
