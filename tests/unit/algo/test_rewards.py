"""R_M and R_S as docs/method.md §Rewards states them."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from mgrpo_actors.algo.config import RewardConfig
from mgrpo_actors.algo.rewards import main_correct_for_sub, main_reward, resolve_sub_weights, sub_reward

CFG = RewardConfig()


def test_main_reward_values():
    rewards = main_reward([True, True, False, True], [1.0, 0.0, 1.0, 0.5], CFG)
    np.testing.assert_allclose(rewards, [1.0, 0.1, 0.0, 0.1 + 0.9 * 0.5])


def test_main_reward_scalar_in_scalar_out():
    assert float(main_reward(True, 1.0, CFG)) == pytest.approx(1.0)


def test_sub_reward_with_expert():
    weights = resolve_sub_weights(CFG, expert_configured=True)
    rewards = sub_reward([True, True, False], [1.0, 0.0, 1.0], [0.0, 1.0, 1.0], weights)
    np.testing.assert_allclose(rewards, [0.1 + 0.4, 0.1 + 0.5, 0.0])


def test_no_expert_folds_beta3_into_beta2_and_logs_it():
    with capture_logs() as logs:
        weights = resolve_sub_weights(CFG, expert_configured=False)
    assert weights.expert_folded and weights.beta_expert == 0.0
    assert weights.beta_correct == pytest.approx(0.9)
    assert [entry["event"] for entry in logs] == ["sub_reward_expert_folded"]
    np.testing.assert_allclose(sub_reward([True, True], [1.0, 0.0], None, weights), [1.0, 0.1])


def test_expert_configured_logs_nothing():
    with capture_logs() as logs:
        resolve_sub_weights(CFG, expert_configured=True)
    assert logs == []


def test_expert_scores_must_match_the_weights():
    with pytest.raises(ValueError, match="r_expert given"):
        sub_reward(True, 1.0, 1.0, resolve_sub_weights(CFG, expert_configured=False))
    with pytest.raises(ValueError, match="r_expert is None"):
        sub_reward(True, 1.0, None, resolve_sub_weights(CFG, expert_configured=True))


def test_main_correct_for_sub_is_zero_where_m_format_is_invalid():
    # docs/method.md §Rewards [ours]: r_correct(M) in R_S is M's r_correct if M's format is valid, else 0.
    np.testing.assert_array_equal(
        main_correct_for_sub([True, False, True, False], [1.0, 1.0, 0.5, 0.0]), [1.0, 0.0, 0.5, 0.0]
    )
    assert float(main_correct_for_sub(False, 1.0)) == 0.0 and float(main_correct_for_sub(True, 0.25)) == 0.25
    # In R_S (β = 0.1, 0.4, 0.5) for a well-formed S with r_expert 1 whose M answered right but malformed:
    # 0.1 + 0.4·0 + 0.5·1 = 0.6, not 1.0.
    weights = resolve_sub_weights(CFG, expert_configured=True)
    assert float(sub_reward(True, main_correct_for_sub(False, 1.0), 1.0, weights)) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: main_reward([True, False], [1.0], CFG), "same shape"),
        (lambda: main_reward([True], [float("nan")], CFG), "r_correct has non-finite"),
        (lambda: main_reward([True], [1.5], CFG), r"r_correct must lie in \[0, 1\]"),
        (lambda: main_reward([1, 0], [1.0, 0.0], CFG), "format_ok must be boolean"),
        (lambda: sub_reward([True], [1.0], [np.nan], resolve_sub_weights(CFG, True)), "r_expert has non-finite"),
        (lambda: sub_reward([True, True], [1.0, 1.0], [1.0], resolve_sub_weights(CFG, True)), "same shape"),
        (lambda: main_correct_for_sub([True, False], [1.0]), "same shape"),
        (lambda: main_correct_for_sub([1, 0], [1.0, 0.0]), "main_format_ok must be boolean"),
        (lambda: main_correct_for_sub([True], [2.0]), r"main_r_correct must lie in \[0, 1\]"),
    ],
)
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


scores = st.floats(0.0, 1.0)


@settings(max_examples=50, deadline=None)
@given(ok=st.booleans(), correct=scores, expert=scores)
def test_rewards_are_bounded_and_zero_on_bad_format(ok, correct, expert):
    r_main = float(main_reward(ok, correct, CFG))
    r_sub = float(sub_reward(ok, correct, expert, resolve_sub_weights(CFG, True)))
    assert 0.0 <= r_main <= 1.0 + 1e-12 and 0.0 <= r_sub <= 1.0 + 1e-12
    if not ok:
        assert r_main == 0.0 and r_sub == 0.0
    else:
        assert r_main >= CFG.alpha_format - 1e-12
