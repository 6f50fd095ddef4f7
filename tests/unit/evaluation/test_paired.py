"""The paired statistics of `mgrpo eval --compare` (evaluation/paired.py) on cases computed by hand."""

from __future__ import annotations

import math

import pytest

from mgrpo_actors.evaluation.paired import PERMUTATIONS, paired_difference, paired_from_reports, question_accuracy


def test_a_hand_computed_case():
    # d = [1, 0, 0, 1, 0.5]: mean 0.5; deviations ±0.5 four times and 0, so the sample sd is sqrt(1 / 4) = 0.5
    # and the standard error 0.5 / sqrt(5). Non-zero d: 1, 1, 0.5; of their 8 sign patterns only +++ and ---
    # reach |sum| >= 2.5: p = 2 / 8.
    paired = paired_difference([1, 1, 0, 1, 0.5], [0, 1, 0, 0, 0])
    assert paired.questions == 5
    assert paired.mean_a == pytest.approx(0.7) and paired.mean_b == pytest.approx(0.2)
    assert paired.difference == pytest.approx(0.5)
    assert paired.std_error == pytest.approx(0.5 / math.sqrt(5))
    assert paired.p_value == pytest.approx(0.25) and paired.exact
    assert (paired.a_better, paired.b_better, paired.ties) == (3, 0, 2)
    # every d_i >= 0: so is every resampled mean
    assert 0.0 <= paired.ci_low <= 0.5 <= paired.ci_high <= 1.0


def test_swapping_a_and_b_negates_the_difference_and_keeps_p():
    a, b = [1, 0, 1, 1, 0, 1, 0.5], [0, 0, 1, 0, 1, 0, 0]
    ab, ba = paired_difference(a, b), paired_difference(b, a)
    assert ba.difference == pytest.approx(-ab.difference) and ba.p_value == pytest.approx(ab.p_value)
    assert (ba.a_better, ba.b_better) == (ab.b_better, ab.a_better)
    assert ba.ci_low == pytest.approx(-ab.ci_high) and ba.ci_high == pytest.approx(-ab.ci_low)


def test_no_difference_has_p_one_and_a_zero_interval():
    paired = paired_difference([1, 0, 1], [1, 0, 1])
    assert paired.difference == 0 and paired.p_value == 1.0 and paired.ties == 3
    assert paired.ci_low == paired.ci_high == 0.0


def test_a_constant_difference_has_that_interval():
    paired = paired_difference([1.0] * 4, [0.5] * 4)
    assert paired.ci_low == paired.ci_high == pytest.approx(0.5) and paired.std_error == 0.0
    assert paired.p_value == pytest.approx(2 / 16)  # all + or all -: 2 of 2^4 patterns


def test_many_differences_are_sampled_and_p_never_zero():
    paired = paired_difference([1.0] * 40, [0.0] * 40)  # only 2 of 2^40 patterns are as extreme
    assert not paired.exact and paired.p_value == pytest.approx(1 / (PERMUTATIONS + 1))


def test_the_same_reports_give_the_same_interval():
    a, b = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1] * 3, [0, 0, 1, 0, 1, 1, 0, 0, 1, 0] * 3
    assert paired_difference(a, b) == paired_difference(a, b)


def report(rows):
    return {"questions": [{"id": qid, "correct": correct} for qid, correct in rows]}


def test_reports_pair_by_question_id_over_their_runs():
    a = report([("q1", [1, 0, 1]), ("q2", [0, 0, 0]), ("q3", [1, 1, 1])])
    b = report([("q3", [1]), ("q1", [0]), ("q9", [1])])  # another order, another run count, a question of its own
    assert question_accuracy(a) == pytest.approx({"q1": 2 / 3, "q2": 0.0, "q3": 1.0})
    paired, shared, only_a, only_b = paired_from_reports(a, b)
    assert shared == ["q1", "q3"] and (only_a, only_b) == (1, 1)
    assert paired.difference == pytest.approx(((2 / 3 - 0) + (1 - 1)) / 2)


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (report([("q1", [1])]), report([("q2", [1])]), "share no question"),
        ({"runs": []}, report([("q1", [1])]), "no per-question rows"),
        (report([("q1", [])]), report([("q1", [1])]), "without id or correct"),
        (report([("q1", [1]), ("q1", [0])]), report([("q1", [1])]), "appears twice"),
    ],
)
def test_reports_that_cannot_pair_are_errors(a, b, message):
    with pytest.raises(ValueError, match=message):
        paired_from_reports(a, b)


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [([1, 0], [1], "equally long"), ([1], [0], "at least 2"), ([1, float("nan"), 0], [0, 0, 0], "finite")],
)
def test_values_that_cannot_pair_are_errors(a, b, message):
    with pytest.raises(ValueError, match=message):
        paired_difference(a, b)


def test_ties_and_negative_differences_by_brute_force():
    # checked by a reviewer enumerating all 2^8 sign patterns in plain Python
    paired = paired_difference([1, 0, 2 / 3, 1, 0.5, 0, 1, 1 / 3], [0, 1, 1 / 3, 1, 0.5, 1 / 3, 0, 0])
    assert paired.difference == pytest.approx(1 / 6) and paired.std_error == pytest.approx(0.2357022604)
    assert paired.p_value == pytest.approx(0.625) and (paired.a_better, paired.b_better, paired.ties) == (4, 2, 2)


def test_sums_equal_but_for_rounding_count_as_extreme():
    # in exact fractions every sign pattern's |sum| is >= the observed one: p = 1 (without the tolerance 0.96875)
    a, b = [0.6, 0.5, 1 / 3, 0.6, 0.25, 0.6, 0.6, 5 / 6], [0.75, 5 / 6, 0.4, 1, 0.5, 0.5, 0.2, 1 / 6]
    assert paired_difference(a, b).p_value == 1.0


def test_a_sampled_p_is_near_the_exact_one():
    # 17 non-zero differences: sampled; the reviewer's enumeration of all 2^17 patterns gives 0.0171051
    a = [1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0.5, 1, 0, 1, 1, 1, 0.5, 1]
    b = [0, 1, 0, 0, 0, 0, 1 / 3, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0.5]
    paired = paired_difference(a, b)
    assert not paired.exact and abs(paired.p_value - 0.0171051) < 0.004
