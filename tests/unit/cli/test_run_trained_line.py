"""The closing line of `mgrpo run` says what the run trained, as it did."""

from __future__ import annotations

from mgrpo_actors.cli.run import trained_line


def test_a_learner_that_applied_no_sample_is_said_to_have_trained_nothing():
    line = trained_line(("main", "sub"), ["main", "sub"], {"main": 4, "sub": 0})
    assert line == "trained: main (4 samples); trained on nothing: sub (no sample had an advantage)"


def test_both_trained_and_a_frozen_side():
    assert trained_line(("main", "sub"), ["main", "sub"], {"main": 8, "sub": 32}) == (
        "trained: main (8 samples), sub (32 samples)"
    )
    assert trained_line(("main", "sub"), ["main"], {}) == (
        "trained: no agent; trained on nothing: main (no sample had an advantage); frozen: sub"
    )
