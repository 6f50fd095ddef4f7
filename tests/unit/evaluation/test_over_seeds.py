"""A figure over seeds (evaluation/over_seeds.py): mean and 95 % Student-t interval, by hand."""

from __future__ import annotations

import math

import pytest

from mgrpo_actors.evaluation.over_seeds import over_seeds, t_975


def test_three_seeds_by_hand():
    # 0.2, 0.4, 0.6: mean 0.4, sample sd 0.2, t(0.975, 2) = 4.303: 0.4 ± 4.303 · 0.2 / sqrt(3)
    result = over_seeds([0.2, 0.4, 0.6])
    half = 4.303 * 0.2 / math.sqrt(3)
    assert result.mean == pytest.approx(0.4)
    assert result.ci_low == pytest.approx(0.4 - half) and result.ci_high == pytest.approx(0.4 + half)
    assert result.values == [0.2, 0.4, 0.6]


def test_one_seed_has_no_interval():
    assert over_seeds([0.5]).ci_low is None and over_seeds([0.5]).ci_high is None


def test_t_quantiles_from_the_table_then_the_normal():
    assert (t_975(1), t_975(2), t_975(30), t_975(31)) == (12.706, 4.303, 2.042, 1.960)
    with pytest.raises(ValueError, match="df >= 1"):
        t_975(0)


@pytest.mark.parametrize("values", [[], [0.1, float("nan")]])
def test_no_or_non_finite_values_are_an_error(values):
    with pytest.raises(ValueError, match="one finite value per seed"):
        over_seeds(values)
