"""Batch filters (learner/batch_filters.py): the staleness bound weights too-old samples 0, counts them
(placeholders are not counted again) and normalises their advantage groups again over the survivors, by hand
values; the staleness seen is reported; the control run's sign flip negates advantages."""

import numpy as np
import pytest

from mgrpo_actors.algo.config import AdvantageConfig
from mgrpo_actors.alignment.batch_rows import BatchRow, placeholder_row, rows_to_batch
from mgrpo_actors.learner.batch_filters import drop_stale, signed_advantages
from mgrpo_actors.learner.micro_batches import trainable_rows

POPULATION = AdvantageConfig()


def _row(i: int, version: int, advantage: float, reward: float = 0.5, group: int = 0) -> BatchRow:
    ids = np.array([5, 6, 7], np.int32)
    mask = np.array([0, 1, 1], np.uint8)
    return BatchRow(
        f"q/0/r{i}", "original", ids, mask, np.zeros(3, np.float32), advantage, 1.0, reward, version, group=group
    )


def _batch():
    # one group of three with one reward 1 and two 0: A = (R − 1/3) / sqrt(2/9) = [1.414, -0.707, -0.707]
    rows = [
        _row(0, 3, 2**0.5, reward=1.0),
        _row(1, 2, -(0.5**0.5), reward=0.0),
        _row(2, 1, -(0.5**0.5), reward=0.0),
        placeholder_row("q/0/r3#0", "placeholder"),
    ]
    return rows_to_batch("run", "main", 4, "b", rows)


def test_a_stale_sample_is_dropped_and_its_group_normalised_over_the_survivors():
    kept, seen = drop_stale(_batch(), learner_version=4, max_staleness=2, advantages=POPULATION)
    # staleness 1, 2, 3: only the version-1 sample is beyond 2; the placeholder was already weight 0
    assert (seen.dropped, seen.regrouped, seen.max) == (1, 1, 3)
    assert seen.mean == pytest.approx(2.0)
    assert kept.weights.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert trainable_rows(kept) == [0, 1]
    # survivors' rewards [1, 0]: mean 0.5, population std 0.5 → advantages [1, -1]; the dropped one 0
    np.testing.assert_allclose(kept.advantages, [1.0, -1.0, 0.0, 0.0], atol=1e-6)


def test_only_the_groups_that_lost_a_member_are_normalised_again():
    rows = [
        _row(0, 5, 1.0, reward=1.0, group=0),
        _row(1, 5, -1.0, reward=0.0, group=0),
        _row(2, 5, 0.7, reward=0.9, group=1),  # group 1 keeps its (aligner's) advantages untouched
        _row(3, 0, -0.7, reward=0.1, group=1),  # … except this stale member, which goes
        _row(4, 5, 0.3, reward=0.4, group=1),
    ]
    kept, seen = drop_stale(rows_to_batch("run", "sub", 5, "b", rows), 5, 1, POPULATION)
    assert (seen.dropped, seen.regrouped) == (1, 1)
    # group 0 untouched; group 1's survivors [0.9, 0.4]: mean 0.65, std 0.25 → [1, -1]
    np.testing.assert_allclose(kept.advantages, [1.0, -1.0, 1.0, 0.0, -1.0], atol=1e-6)
    np.testing.assert_array_equal(kept.weights, [1, 1, 1, 0, 1])


def test_a_lone_survivor_has_no_relative_signal_and_gets_advantage_zero():
    rows = [_row(0, 4, 1.0, reward=1.0), _row(1, 1, -1.0, reward=0.0)]
    kept, seen = drop_stale(rows_to_batch("run", "main", 4, "b", rows), 4, 1, POPULATION)
    assert seen.dropped == 1
    np.testing.assert_array_equal(kept.advantages, [0.0, 0.0])


def test_unbiased_std_is_the_one_configured():
    rows = [_row(i, 4 if i < 3 else 0, 0.0, reward=r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    kept, _ = drop_stale(rows_to_batch("run", "main", 4, "b", rows), 4, 1, AdvantageConfig(std="unbiased"))
    # survivors [1, 0, 0]: mean 1/3, unbiased std sqrt((4/9 + 1/9 + 1/9) / 2) = sqrt(1/3)
    expected = (np.array([1.0, 0.0, 0.0]) - 1 / 3) / np.sqrt(1 / 3)
    np.testing.assert_allclose(kept.advantages[:3], expected, atol=1e-6)


def test_fresh_batches_are_kept_as_they_are_and_the_staleness_reported():
    batch = _batch()
    same, seen = drop_stale(batch, learner_version=3, max_staleness=2, advantages=POPULATION)
    assert same is batch
    assert (seen.dropped, seen.regrouped, seen.max, seen.mean) == (0, 0, 2, 1.0)
    assert seen.as_dict() == {
        "staleness_mean": 1.0,
        "staleness_max": 2.0,
        "stale_dropped": 0.0,
        "stale_groups_renormalised": 0.0,
    }


def test_sign_flip_negates_every_advantage():
    batch = rows_to_batch("run", "main", 4, "b", [_row(0, 3, 1.0), _row(1, 2, -1.0), _row(2, 1, 0.5)])
    assert signed_advantages(batch, 1) is batch
    flipped = signed_advantages(batch, -1)
    assert flipped.advantages.tolist() == [-1.0, 1.0, -0.5]
    assert flipped.advantages.dtype == np.float32
