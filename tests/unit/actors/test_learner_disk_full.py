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


def test_a_batch_whose_write_finds_the_disk_full_stops_the_run_once_and_halts_the_learner():
    from types import SimpleNamespace

    from actors.learner import LearnerActor

    stopped, told, naks = [], [], []
    delivery = SimpleNamespace(nak=lambda delay_s=0.0: naks.append(delay_s))

    def apply(batch_id, held):
        fake.stepped = True  # the optimizer stepped, then the checkpoint found the disk full
        raise disk_full("checkpoint step2", "/run/checkpoints/main/step2")

    fake = SimpleNamespace(
        halted="",
        stepped=False,
        _apply=apply,
        bus=SimpleNamespace(stop_run=stopped.append),
        actor_ref=SimpleNamespace(tell=told.append),
        log=SimpleNamespace(error=lambda *a, **k: None, warning=lambda *a, **k: None),
    )
    assert LearnerActor._try_apply(fake, "b2", [(None, delivery)]) is False
    assert stopped == [
        "no space left on device: checkpoint step2 not written to /run/checkpoints/main/step2; "
        "free space there and continue with --resume"
    ]
    assert told == [] and naks == [1.0] and fake.halted  # no crash: the node stops with exit 3
    assert LearnerActor._try_apply(fake, "b3", [(None, delivery)]) is False  # nothing more is applied
    assert len(stopped) == 1 and naks == [1.0, 1.0]
