"""Batch filters (learner/batch_filters.py): async mode's staleness bound weights too-old samples 0 and
counts them (placeholders are not counted again); the control run's sign flip negates advantages."""

import numpy as np

from mgrpo_actors.alignment.batch_rows import BatchRow, placeholder_row, rows_to_batch
from mgrpo_actors.learner.batch_filters import drop_stale, signed_advantages
from mgrpo_actors.learner.micro_batches import trainable_rows


def _row(i: int, version: int, advantage: float) -> BatchRow:
    ids = np.array([5, 6, 7], np.int32)
    return BatchRow(
        f"q/0/r{i}",
        "original",
        ids,
        np.array([0, 1, 1], np.uint8),
        np.zeros(3, np.float32),
        advantage,
        1.0,
        0.5,
        version,
    )


def _batch():
    rows = [_row(0, 3, 1.0), _row(1, 2, -1.0), _row(2, 1, 0.5), placeholder_row("q/0/r3#0", "placeholder")]
    return rows_to_batch("run", "main", 4, "b", rows)


def test_samples_beyond_the_bound_get_weight_zero_and_are_counted():
    kept, dropped = drop_stale(_batch(), learner_version=4, max_staleness=2)
    # staleness 1, 2, 3: only the version-1 sample is beyond 2; the placeholder was already weight 0
    assert dropped == 1
    assert kept.weights.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert trainable_rows(kept) == [0, 1]
    assert kept.advantages.tolist() == _batch().advantages.tolist()


def test_sync_mode_and_fresh_batches_keep_everything():
    batch = _batch()
    assert drop_stale(batch, learner_version=4, max_staleness=None) == (batch, 0)
    same, dropped = drop_stale(batch, learner_version=3, max_staleness=2)
    assert dropped == 0 and same.weights.tolist() == batch.weights.tolist()


def test_sign_flip_negates_every_advantage():
    batch = _batch()
    assert signed_advantages(batch, 1) is batch
    flipped = signed_advantages(batch, -1)
    assert flipped.advantages.tolist() == [-1.0, 1.0, -0.5, 0.0]
    assert flipped.advantages.dtype == np.float32
