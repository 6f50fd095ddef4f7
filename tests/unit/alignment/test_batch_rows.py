"""Rows of an aligned batch and the AlignedBatch they make (alignment/batch_rows.py): trajectory rows train
(weight 1), placeholder rows are one masked token (weight 0, advantage 0, reward 0), arrays concatenated
in row order with the wire dtypes, and the batch encodes."""

import numpy as np

from mgrpo_actors.alignment.batch_rows import placeholder_row, rows_to_batch, trajectory_row
from protocols import SAMPLE_KINDS, Trajectory, decode, encode


def traj(tokens, mask, version=3):
    return Trajectory(
        run_id="run",
        side="sub",
        step=1,
        query_id="q",
        rollout_index=0,
        call_id="c",
        policy_version=version,
        token_ids=np.array(tokens, np.int32),
        loss_mask=np.array(mask, np.uint8),
        logprobs=np.array([-0.5 if m else 0.0 for m in mask], np.float32),
        temperature=0.6,
        top_p=0.95,
        top_k=7,
    )


def test_trajectory_row_carries_the_trajectory_and_its_sampling():
    row = trajectory_row(traj([4, 5, 6], [0, 1, 1]), "q/a/r0/c#0", "duplicate", advantage=-0.5, reward=0.25, group=3)
    assert (row.sample_id, row.kind, row.advantage, row.weight, row.reward) == (
        "q/a/r0/c#0",
        "duplicate",
        -0.5,
        1.0,
        0.25,
    )
    assert (row.policy_version, row.temperature, row.top_p, row.top_k) == (3, 0.6, np.float32(0.95), 7)
    assert row.group == 3
    np.testing.assert_array_equal(row.token_ids, [4, 5, 6])
    np.testing.assert_array_equal(row.loss_mask, [0, 1, 1])


def test_placeholder_row_is_one_masked_token():
    row = placeholder_row("q/-/r1/-#0", "failed")
    assert (row.kind, row.advantage, row.weight, row.reward, row.policy_version) == ("failed", 0.0, 0.0, 0.0, -1)
    np.testing.assert_array_equal(row.token_ids, [0])
    np.testing.assert_array_equal(row.loss_mask, [0])
    np.testing.assert_array_equal(row.logprobs, [0])


def test_rows_to_batch_concatenates_in_row_order():
    rows = [
        trajectory_row(traj([1, 2], [0, 1]), "s0", "original", 1.5, 1.0, group=0),
        placeholder_row("s1", "placeholder"),
        trajectory_row(traj([7, 8, 9], [0, 1, 1], version=4), "s2", "duplicate", -1.5, 0.1, group=1),
    ]
    batch = rows_to_batch("run", "sub", 2, "run-sub-step2", rows, d=3)
    assert (batch.run_id, batch.side, batch.step, batch.batch_id, batch.d) == ("run", "sub", 2, "run-sub-step2", 3)
    assert batch.sample_ids == ["s0", "s1", "s2"]
    np.testing.assert_array_equal(batch.lengths, [2, 1, 3])
    np.testing.assert_array_equal(batch.token_ids, [1, 2, 0, 7, 8, 9])
    np.testing.assert_array_equal(batch.loss_mask, [0, 1, 0, 0, 1, 1])
    np.testing.assert_allclose(batch.logprobs, [0, -0.5, 0, 0, -0.5, -0.5])
    np.testing.assert_allclose(batch.advantages, [1.5, 0, -1.5])
    np.testing.assert_array_equal(batch.weights, [1, 0, 1])
    np.testing.assert_allclose(batch.rewards, [1.0, 0, 0.1], rtol=1e-6)
    np.testing.assert_array_equal(batch.policy_versions, [3, -1, 4])
    assert [SAMPLE_KINDS[i] for i in batch.kinds] == ["original", "placeholder", "duplicate"]
    np.testing.assert_allclose(batch.temperatures, [0.6, 1.0, 0.6], rtol=1e-6)
    np.testing.assert_allclose(batch.top_ps, [0.95, 1.0, 0.95], rtol=1e-6)
    np.testing.assert_array_equal(batch.top_ks, [7, 0, 7])
    np.testing.assert_array_equal(batch.groups, [0, -1, 1])  # a placeholder is in no advantage group
    dtypes = {
        name: getattr(batch, name).dtype
        for name in ("lengths", "token_ids", "loss_mask", "logprobs", "advantages", "weights", "kinds")
    }
    assert dtypes == {
        "lengths": np.int32,
        "token_ids": np.int32,
        "loss_mask": np.uint8,
        "logprobs": np.float32,
        "advantages": np.float32,
        "weights": np.float32,
        "kinds": np.uint8,
    }
    assert batch.lengths.sum() == len(batch.token_ids) == len(batch.loss_mask) == len(batch.logprobs)
    assert decode(encode(batch)) == batch  # a valid wire message
