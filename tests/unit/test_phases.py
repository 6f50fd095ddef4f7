"""The phase recorder (mgrpo_actors/phases.py): a no-op while off; while on, bounded, thread-safe."""

from __future__ import annotations

import threading
import time

import pytest

from mgrpo_actors import phases


@pytest.fixture(autouse=True)
def _off_afterwards():
    phases.disable()
    yield
    phases.disable()


def test_off_by_default_phases_are_a_shared_no_op():
    assert phases.recorder() is None
    assert phases.phase(phases.GENERATE) is phases.phase(phases.LEARN)  # one shared null context: nothing allocated
    with phases.phase(phases.GENERATE):
        pass
    assert phases.recorder() is None


def test_on_it_records_kind_start_and_end_in_wall_clock_seconds():
    rec = phases.enable()
    before = time.time()
    with phases.phase(phases.ALIGN):
        time.sleep(0.01)
    [interval] = rec.intervals()
    assert interval.kind == "align"
    assert before <= interval.start and interval.end - interval.start >= 0.009 and interval.end <= time.time()


def test_a_phase_that_raises_still_records_its_time():
    rec = phases.enable()
    with pytest.raises(ValueError), phases.phase(phases.WEIGHTS):
        raise ValueError("boom")
    assert [i.kind for i in rec.intervals()] == ["weights"]


def test_timed_wraps_a_function_and_keeps_its_result_and_name():
    @phases.timed(phases.LEARN)
    def double(x: int) -> int:
        return 2 * x

    assert double(3) == 6 and double.__name__ == "double"  # off: nothing recorded
    rec = phases.enable()
    assert double(4) == 8
    assert [i.kind for i in rec.intervals()] == ["learn"]


def test_the_recorder_is_bounded_and_counts_what_it_dropped():
    rec = phases.enable(max_intervals=3)
    for i in range(5):
        rec.add("generate", float(i), float(i) + 0.5)
    assert [i.start for i in rec.intervals()] == [2.0, 3.0, 4.0] and rec.dropped == 2
    rec.clear()
    assert rec.intervals() == [] and rec.dropped == 0


def test_threads_record_into_the_one_recorder():
    rec = phases.enable()

    def work():
        for _ in range(200):
            with phases.phase(phases.GENERATE):
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(rec.intervals()) == 800


def test_disable_stops_recording_and_enable_starts_afresh():
    first = phases.enable()
    with phases.phase(phases.CHECKPOINT):
        pass
    phases.disable()
    with phases.phase(phases.CHECKPOINT):
        pass
    assert len(first.intervals()) == 1
    assert phases.enable().intervals() == []
