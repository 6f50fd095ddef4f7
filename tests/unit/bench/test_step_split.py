"""Interval arithmetic of `mgrpo bench steps` (mgrpo_actors/bench/step_split.py), on a case computed by hand."""

from __future__ import annotations

import pytest

from mgrpo_actors.bench.step_split import CATEGORIES, clip, mean_split, span_length, split_step, subtract, union
from mgrpo_actors.phases import Interval


def test_union_merges_overlapping_and_touching_spans_and_drops_empty_ones():
    assert union([(3, 4), (1, 2), (1.5, 2.5), (2.5, 3), (5, 5), (6, 5)]) == [(1, 4)]
    assert union([(0, 1), (2, 3)]) == [(0, 1), (2, 3)]
    assert union([]) == []


def test_clip_keeps_the_parts_inside_the_window():
    assert clip([(0, 2), (3, 4), (5, 9), (9, 10)], 1, 6) == [(1, 2), (3, 4), (5, 6)]


def test_subtract_removes_covered_instants():
    assert subtract([(0, 10)], [(1, 2), (4, 5), (9, 12)]) == [(0, 1), (2, 4), (5, 9)]
    assert subtract([(0, 1), (3, 6)], [(0.5, 4)]) == [(0, 0.5), (4, 6)]
    assert subtract([(1, 2)], [(0, 3)]) == []
    assert subtract([(1, 2)], []) == [(1, 2)]


# Step 0 is [10, 20), step 1 is [20, 25).
INTERVALS = [
    Interval("generate", 9, 12),  # straddles step 0's start: 10-12 counts
    Interval("generate", 11, 13),  # overlaps the one before: generate covers 10-13 once
    Interval("learn", 12.5, 14),  # 12.5-13 is generate's already: learn gets 13-14
    Interval("weights", 13.5, 15),  # weights gets 14-15
    Interval("checkpoint", 14.5, 16),  # checkpoint gets 15-16
    Interval("align", 17, 17.5),
    Interval("align", 19, 21),  # straddles the boundary: 19-20 in step 0, 20-21 in step 1
    Interval("tool", 16, 17),  # not a kind the split knows: "other"
    Interval("generate", 22, 23),
    Interval("generate", 25, 26),  # after step 1's end
]


def test_a_step_is_split_with_each_instant_counted_once():
    split = split_step(0, 10, 20, INTERVALS)
    assert split.wall == 10
    assert split.seconds == pytest.approx(
        {"generate": 3, "learn": 1, "weights": 1, "checkpoint": 1, "align": 1.5, "score": 0, "other": 2.5}
    )
    assert sum(split.seconds.values()) == pytest.approx(split.wall)
    # each kind alone
    assert split.busy == pytest.approx(
        {"generate": 3, "learn": 1.5, "weights": 1.5, "checkpoint": 1.5, "align": 1.5, "score": 0}
    )
    assert split.compute == pytest.approx(4)  # |generate ∪ learn| = 10-14
    assert split.non_compute_share == pytest.approx(0.6)


def test_the_next_step_gets_the_rest_of_a_straddling_interval():
    split = split_step(1, 20, 25, INTERVALS)
    assert split.seconds == pytest.approx(
        {"generate": 1, "learn": 0, "weights": 0, "checkpoint": 0, "align": 1, "score": 0, "other": 3}
    )
    assert split.non_compute_share == pytest.approx(0.8)


def test_an_empty_step_is_all_other_and_the_mean_averages_seconds():
    empty = split_step(2, 30, 32, INTERVALS)
    assert empty.seconds["other"] == 2 and empty.non_compute_share == 1.0
    mean = mean_split([split_step(0, 10, 20, INTERVALS), split_step(1, 20, 25, INTERVALS)])
    assert mean is not None and mean.wall == 7.5
    assert mean.seconds["generate"] == pytest.approx(2) and mean.seconds["other"] == pytest.approx(2.75)
    assert sum(mean.seconds[c] for c in CATEGORIES) == pytest.approx(mean.wall)
    assert mean.non_compute_share == pytest.approx(1 - 2.5 / 7.5)
    assert mean_split([]) is None
    assert span_length([(0, 1), (2, 4)]) == 3
