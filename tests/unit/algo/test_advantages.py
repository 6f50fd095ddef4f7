"""Group-relative advantages, docs/method.md §Group-relative advantages."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mgrpo_actors.algo.advantages import group_advantages, group_statistics, main_advantages, sub_advantages
from mgrpo_actors.algo.config import AdvantageConfig

CFG = AdvantageConfig()
# Rewards on a coarse grid, as real rewards are (0, 0.1, 0.5, 1, ...), so ties and std = 0 happen.
reward_values = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.6, 1.0])


def _assert_standardised(advantages, counted, stats):
    for g in range(advantages.shape[0]):
        members = advantages[g][counted[g]]
        if stats.degenerate[g]:
            assert np.all(advantages[g] == 0.0)
        else:
            assert abs(members.mean()) < 1e-9
            assert abs(members.std() - 1.0) < 1e-9  # numpy's std is the population std
        assert np.all(advantages[g][~counted[g]] == 0.0)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 8)), elements=reward_values))
def test_main_advantages_zero_mean_unit_population_std(rewards):
    advantages = main_advantages(rewards, CFG)
    counted = np.ones_like(rewards, dtype=bool)
    _assert_standardised(advantages, counted, group_statistics(rewards, counted, CFG))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_sub_advantages_over_counted_slots(data):
    shape = data.draw(st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)))
    rewards = data.draw(arrays(np.float64, shape, elements=reward_values))
    weights = data.draw(arrays(np.float64, shape, elements=st.sampled_from([0.0, 1.0])))
    advantages = sub_advantages(rewards, weights, CFG)
    assert advantages.shape == shape
    flat_counted = weights.reshape(shape[0], -1) > 0
    flat_rewards = rewards.reshape(shape[0], -1)
    _assert_standardised(
        advantages.reshape(shape[0], -1), flat_counted, group_statistics(flat_rewards, flat_counted, CFG)
    )


def test_known_values():
    np.testing.assert_allclose(main_advantages([[0.1, 1.0, 1.0]], CFG), [[-np.sqrt(2), np.sqrt(0.5), np.sqrt(0.5)]])


def test_all_d_times_k_slots_form_one_group_and_duplicates_count():
    # Rollout 0 holds one sub-trajectory twice (a duplicate); rollout 1 holds two others.
    rewards = np.array([[[1.0, 1.0], [0.0, 0.5]]])
    advantages = sub_advantages(rewards, np.ones_like(rewards), CFG)
    flat = rewards.ravel()
    np.testing.assert_allclose(advantages.ravel(), (flat - flat.mean()) / flat.std())


def test_placeholders_get_zero_and_do_not_move_the_statistics():
    rewards = np.array([[[123.0, 0.0], [1.0, 0.0]]])
    weights = np.array([[[0.0, 1.0], [1.0, 1.0]]])
    advantages = sub_advantages(rewards, weights, CFG)
    assert advantages[0, 0, 0] == 0.0
    counted = np.array([0.0, 1.0, 0.0])
    np.testing.assert_allclose(advantages.ravel()[1:], (counted - counted.mean()) / counted.std())


def test_placeholder_rewards_may_be_nan():
    rewards = np.array([[[np.nan, 0.0], [1.0, 0.0]]])
    advantages = sub_advantages(rewards, np.array([[[0.0, 1.0], [1.0, 1.0]]]), CFG)
    assert np.isfinite(advantages).all()


def test_zero_std_gives_zero_advantages():
    rewards = np.array([[0.5, 0.5, 0.5], [0.0, 1.0, 0.0]])
    advantages = main_advantages(rewards, CFG)
    assert np.all(advantages[0] == 0.0) and np.any(advantages[1] != 0.0)
    # Rounding noise below eps is no signal either.
    noisy = np.array([[0.1 + 0.2, 0.3, 0.3]])
    assert np.all(main_advantages(noisy, CFG) == 0.0)


def test_unbiased_std_option():
    rewards = np.array([[0.0, 1.0, 1.0, 0.0, 0.5]])
    advantages = main_advantages(rewards, AdvantageConfig(std="unbiased"))
    assert advantages.std(ddof=1) == pytest.approx(1.0)
    # A single counted member has no unbiased std: degenerate, advantage 0.
    alone = sub_advantages(np.ones((1, 2, 1)), np.array([[[1.0], [0.0]]]), AdvantageConfig(std="unbiased"))
    assert np.all(alone == 0.0)


def test_sub_groups_with_k_1_and_at_least_two_counted_slots_carry_signal():
    # docs/method.md §Group-relative advantages: K = 1 is allowed for S. Rewards (0, 1, 1): mean 2/3,
    # population std √((4/9 + 1/9 + 1/9)/3) = √2/3, so A = (−2/3, 1/3, 1/3)·3/√2 = (−√2, 1/√2, 1/√2).
    advantages = sub_advantages(np.array([[[0.0, 1.0, 1.0]]]), np.ones((1, 1, 3)), CFG)
    np.testing.assert_allclose(advantages, [[[-1.4142135623730951, 0.7071067811865476, 0.7071067811865476]]])


def test_sub_groups_with_fewer_than_two_counted_slots_are_degenerate():
    # K = 1, D = 1: one member, no relative signal.
    assert sub_advantages(np.array([[[1.0]]]), np.ones((1, 1, 1)), CFG).tolist() == [[[0.0]]]
    # K = 1, D = 3 with two placeholders: one counted member, advantages 0.
    alone = sub_advantages(np.array([[[1.0, 0.0, 0.0]]]), np.array([[[1.0, 0.0, 0.0]]]), CFG)
    assert alone.tolist() == [[[0.0, 0.0, 0.0]]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: main_advantages([[1.0], [0.0]], CFG), "K = 1"),
        (lambda: main_advantages(np.zeros((0, 4)), CFG), "empty batch"),
        (lambda: main_advantages([1.0, 0.0], CFG), r"shaped \(B, K\)"),
        (lambda: main_advantages([[1.0, np.nan]], CFG), r"NaN or inf at \(group, member\) \[\(0, 1\)\]"),
        (lambda: sub_advantages(np.zeros((1, 0, 4)), np.ones((1, 0, 4)), CFG), "empty groups"),
        (lambda: sub_advantages(np.zeros((1, 2, 0)), np.ones((1, 2, 0)), CFG), "empty groups"),
        (lambda: sub_advantages(np.zeros((1, 2, 2)), np.ones((1, 2, 3)), CFG), "does not match weights"),
        (lambda: sub_advantages(np.zeros((2, 4)), np.ones((2, 4)), CFG), r"shaped \(B, K, D\)"),
        (lambda: group_advantages(np.zeros((2, 3)), np.ones((2, 2), dtype=bool), CFG), "does not match mask"),
        (lambda: group_advantages(np.zeros((2, 0)), np.ones((2, 0), dtype=bool), CFG), "empty groups"),
    ],
)
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
