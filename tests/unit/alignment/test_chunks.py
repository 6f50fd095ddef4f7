"""A step's batch too big for one NATS message travels as chunks of whole samples."""

import numpy as np
import pytest

from mgrpo_actors.alignment.batch_rows import placeholder_row, rows_to_batch, split_batch, trajectory_row
from protocols import Trajectory, encode


def _rows(n: int, tokens: int):
    rows = []
    for i in range(n):
        traj = Trajectory(
            run_id="r",
            side="sub",
            step=0,
            query_id="q",
            rollout_index=i,
            call_id=f"c{i}",
            policy_version=3,
            token_ids=np.arange(tokens, dtype=np.int32) + i,
            loss_mask=np.ones(tokens, np.uint8),
            logprobs=np.full(tokens, -0.5, np.float32),
        )
        rows.append(trajectory_row(traj, f"q/a/r{i}/c{i}#0", "original", advantage=float(i), reward=0.1 * i, group=0))
    return [*rows, placeholder_row("q/a/r9/-#0", "placeholder")]


def test_a_batch_that_fits_stays_one_message():
    batch = rows_to_batch("r", "sub", 0, "b", _rows(4, 50), d=2)
    assert split_batch(batch, 1 << 20) == [batch] and batch.num_chunks == 1


def test_chunks_are_under_the_limit_and_add_up_to_the_batch():
    batch = rows_to_batch("r", "sub", 0, "b", _rows(40, 3000), d=2)  # ~1 MB
    limit = 256 * 1024
    chunks = split_batch(batch, limit)
    assert len(chunks) > 1 and [c.chunk for c in chunks] == list(range(len(chunks)))
    assert all(c.num_chunks == len(chunks) and c.batch_id == "b" and c.d == 2 for c in chunks)
    assert all(len(encode(c)) < limit for c in chunks)
    assert sum((c.sample_ids for c in chunks), []) == batch.sample_ids
    for name in (
        "token_ids",
        "loss_mask",
        "logprobs",
        "lengths",
        "advantages",
        "weights",
        "rewards",
        "kinds",
        "policy_versions",
    ):
        np.testing.assert_array_equal(np.concatenate([getattr(c, name) for c in chunks]), getattr(batch, name))
    for chunk in chunks:  # each chunk is self-consistent: its lengths cover its tokens
        assert chunk.lengths.sum() == len(chunk.token_ids) == len(chunk.loss_mask)


def test_a_sample_bigger_than_a_message_is_a_clear_error():
    batch = rows_to_batch("r", "sub", 0, "b", _rows(1, 20000), d=1)
    with pytest.raises(ValueError, match="nats.max_message_bytes"):
        split_batch(batch, 100 * 1024)


def test_chunks_join_back_into_the_batch_in_any_order():
    from mgrpo_actors.alignment.batch_rows import join_chunks

    batch = rows_to_batch("r", "sub", 0, "b", _rows(40, 3000), d=2)
    chunks = split_batch(batch, 256 * 1024)
    assert join_chunks(list(reversed(chunks))) == batch
    with pytest.raises(ValueError, match="chunks"):
        join_chunks(chunks[1:])
