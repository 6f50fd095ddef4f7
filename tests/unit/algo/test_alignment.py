"""Trajectory alignment and D: auto, docs/method.md §Trajectory alignment."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_actors.algo.alignment import DEstimator, SlotKind, align
from mgrpo_actors.algo.config import AlignmentConfig


def _ids(counts):
    """Call ids "t{j}" for a nested list of d_k counts: unique within a rollout only, like the rollout code's."""
    return [[[f"t{j}" for j in range(n)] for n in row] for row in counts]


batches = st.integers(1, 4).flatmap(
    lambda k: st.lists(st.lists(st.integers(0, 12), min_size=k, max_size=k), min_size=1, max_size=4)
)


@settings(max_examples=80, deadline=None)
@given(counts=batches, d=st.integers(1, 8), mode=st.sampled_from(["duplicate", "mask"]), seed=st.integers(0, 2**32))
def test_alignment_invariants(counts, d, mode, seed):
    sub_ids = _ids(counts)
    aligned = align(sub_ids, d, np.random.default_rng(seed), mode=mode)
    batch, k = len(counts), len(counts[0])
    assert aligned.num_samples == batch * k * d
    assert aligned.source.shape == aligned.kind.shape == aligned.weight.shape == (batch, k, d)
    for b in range(batch):
        for r in range(k):
            own = sub_ids[b][r]
            d_k = len(own)
            kinds = aligned.kind[b, r]
            keys = [None if s < 0 else aligned.ids[s] for s in aligned.source[b, r]]
            assert all(key is None or key[:2] == (b, r) for key in keys)  # only this rollout's own
            sources = [None if key is None else key[2] for key in keys]
            originals = [s for s, kind in zip(sources, kinds) if kind == SlotKind.ORIGINAL]
            duplicates = [s for s, kind in zip(sources, kinds) if kind == SlotKind.DUPLICATE]
            placeholders = [s for s, kind in zip(sources, kinds) if kind == SlotKind.PLACEHOLDER]
            assert all(key[:2] == (b, r) for key in aligned.dropped[b][r])
            dropped = [key[2] for key in aligned.dropped[b][r]]
            # Only from the same rollout; originals distinct; kept and dropped partition the rollout.
            assert set(originals) | set(duplicates) <= set(own)
            assert len(set(originals)) == len(originals) == min(d_k, d)
            assert sorted(originals + list(dropped)) == sorted(own)
            assert all(s is None for s in placeholders)
            # What was added or removed is exactly |d_k − D|.
            assert len(duplicates) + len(placeholders) + len(dropped) == abs(d_k - d)
            assert len(dropped) == max(d_k - d, 0) == aligned.num_dropped()[b, r]
            if mode == "mask" or d_k == 0:
                assert len(duplicates) == 0
            else:
                assert len(placeholders) == 0
            np.testing.assert_array_equal(aligned.weight[b, r], (kinds != SlotKind.PLACEHOLDER).astype(np.float32))
    summary = aligned.summary()
    assert summary["original"] + summary["duplicate"] + summary["placeholder"] == aligned.num_samples


def test_same_seed_same_batch_other_seed_other_batch():
    sub_ids = _ids([[7, 1, 0, 3]] * 8)
    first, again = (align(sub_ids, 4, np.random.default_rng(1)) for _ in range(2))
    np.testing.assert_array_equal(first.source, again.source)
    assert first.dropped == again.dropped
    other = align(sub_ids, 4, np.random.default_rng(2))
    assert not np.array_equal(first.source, other.source)


def test_drops_and_duplicates_are_uniform():
    queries = 4000
    rng = np.random.default_rng(0)
    # Drop: 4 calls to D = 2, each kept with probability 1/2.
    dropped = align(_ids([[4]] * queries), 2, rng)
    slot_ids = [[s.call_id == f"t{j}" for j in range(4)] for s in dropped.slots()]
    kept = np.array(slot_ids).reshape(queries, 2, 4).any(axis=1)
    np.testing.assert_allclose(kept.mean(axis=0), 0.5, atol=0.03)
    # Duplicate: 3 calls to D = 4, the extra slot is each call with probability 1/3.
    duplicated = align(_ids([[3]] * queries), 4, rng)
    extra = np.array([duplicated.ids[s][2] for s in duplicated.source[:, 0, 3]])
    counts = np.array([(extra == f"t{j}").mean() for j in range(3)])
    np.testing.assert_allclose(counts, 1 / 3, atol=0.03)


def test_rollout_without_sub_calls_gets_zero_weight_placeholders():
    aligned = align([[[], ["a"]]], 3, np.random.default_rng(0))
    assert np.all(aligned.kind[0, 0] == SlotKind.PLACEHOLDER) and np.all(aligned.weight[0, 0] == 0.0)
    assert [s.call_id for s in aligned.slots()][3:] == ["a", "a", "a"]
    assert [s.source_id for s in aligned.slots()][3:] == [(0, 1, "a")] * 3


def test_gather_places_values_on_slots():
    aligned = align([[["a", "b"], []]], 3, np.random.default_rng(0), mode="mask")
    values = aligned.gather({(0, 0, "a"): 0.25, (0, 0, "b"): 0.5}, fill=-1.0)
    np.testing.assert_array_equal(values, [[[0.25, 0.5, -1.0], [-1.0, -1.0, -1.0]]])
    np.testing.assert_array_equal(aligned.gather([0.25, 0.5]), [[[0.25, 0.5, 0.0], [0.0, 0.0, 0.0]]])
    with pytest.raises(ValueError, match=r"no value for sub-trajectory key\(s\) .* \[\(0, 0, 'b'\)\]"):
        aligned.gather({(0, 0, "a"): 1.0})
    with pytest.raises(ValueError, match="no value"):
        aligned.gather({"a": 0.25, "b": 0.5})  # bare call ids are not keys
    with pytest.raises(ValueError, match="does not match the 2 input ids"):
        aligned.gather([1.0])


def test_the_same_call_id_in_two_queries_or_rollouts_is_two_sub_trajectories():
    # Call ids are unique only within a query (docs/method.md: "r{k}.t{i}"); the plan keys them by (b, k, call id).
    aligned = align([[["t0"], ["t0"]], [["t0"], []]], 1, np.random.default_rng(0), mode="mask")
    assert aligned.ids == ((0, 0, "t0"), (0, 1, "t0"), (1, 0, "t0"))
    rewards = {(0, 0, "t0"): 0.1, (0, 1, "t0"): 0.5, (1, 0, "t0"): 1.0}
    np.testing.assert_array_equal(aligned.gather(rewards, fill=-1.0), [[[0.1], [0.5]], [[1.0], [-1.0]]])


def test_placeholders_get_an_all_zero_loss_mask():
    # Slots in order: (0,0,0) t0, (0,0,1) placeholder, (0,1,0) placeholder, (0,1,1) placeholder.
    aligned = align([[["t0"], []]], 2, np.random.default_rng(0), mode="mask")
    np.testing.assert_array_equal(aligned.loss_weights(), [1.0, 0.0, 0.0, 0.0])
    assert aligned.loss_weights().tolist() == [s.weight for s in aligned.slots()]
    mask = np.array([[0, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 1]], dtype=np.float32)
    np.testing.assert_array_equal(aligned.mask_placeholders(mask), [[0, 1, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    as_torch = aligned.mask_placeholders(torch.tensor(mask, dtype=torch.bool))
    assert as_torch.dtype == torch.bool
    assert as_torch.tolist() == [[False, True, True], [False] * 3, [False] * 3, [False] * 3]
    with pytest.raises(ValueError, match=r"shaped \(4, T\)"):
        aligned.mask_placeholders(mask[:3])


@pytest.mark.parametrize(
    ("sub_ids", "d", "mode", "message"),
    [
        ([], 2, "duplicate", "empty batch"),
        ([[]], 2, "duplicate", "K = 0"),
        ([[["a"], ["b"]], [["c"]]], 2, "duplicate", "query 1 has 1 rollouts, query 0 has 2"),
        ([[["x"], ["a", "b", "a"]]], 2, "duplicate", r"unique within a rollout; query 0 rollout 1 repeats \['a'\]"),
        ([[["a"]]], 0, "duplicate", "D must be an integer >= 1"),
        ([[["a"]]], 2, "pad", "mode must be"),
    ],
)
def test_bad_input_is_a_clear_value_error(sub_ids, d, mode, message):
    with pytest.raises(ValueError, match=message):
        align(sub_ids, d, np.random.default_rng(0), mode=mode)


def test_fixed_d_never_changes():
    estimator = DEstimator(AlignmentConfig(d=5))
    estimator.observe([0, 40, 40])
    assert estimator.end_step() == 5 == estimator.d
    assert estimator.coverage() == pytest.approx(1 / 3)


def test_auto_d_is_the_quantile_and_changes_only_at_end_step():
    estimator = DEstimator(AlignmentConfig(d="auto", d_initial=8, window=1000))
    assert estimator.d == 8 and estimator.coverage() is None
    # 990 rollouts with d_k <= 3, 10 with d_k = 30: P(d_k <= 3) = 0.99.
    estimator.observe([0, 1, 2, 3] * 247 + [3, 3] + [30] * 10)
    assert estimator.d == 8  # frozen during the step
    assert estimator.end_step() == 3 == estimator.d
    assert estimator.coverage() == pytest.approx(0.99)
    # One more long rollout pushes P(d_k <= 3) below 0.99 -> D jumps to 30, the next observed value.
    estimator.observe([30])
    assert estimator.d == 3 and estimator.end_step() == 30


def test_auto_d_window_rolls_and_bounds_apply():
    estimator = DEstimator(AlignmentConfig(d="auto", window=10, d_initial=4, d_min=2, d_max=6))
    estimator.observe([50] * 10)
    assert estimator.end_step() == 6
    estimator.observe([0] * 10)  # the 50s leave the window
    assert estimator.end_step() == 2
    with pytest.raises(ValueError, match=">= 0"):
        estimator.observe([-1])
