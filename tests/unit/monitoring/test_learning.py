"""M's learning check (mgrpo_actors.monitoring.learning): the stratified exact test against a brute force over
every way the rollouts could have fallen in the two windows and an independent exact count, the first/last
windows `learning_check` compares, its summary line, and the `learning` entry of summary.json (report.py)."""

from __future__ import annotations

import json
from fractions import Fraction
from itertools import combinations, product
from math import comb, prod

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mgrpo_actors.monitoring.learning import LearningCheck, learning_check, stratified_rise_p_value
from mgrpo_actors.monitoring.report import write_summary_json

Stratum = tuple[int, int, int, int]  # (a_q correct of n_q rollouts before, b_q correct of m_q after)


def brute_force_p(strata: list[Stratum]) -> Fraction:
    """P(Σ b_q ≥ observed) by listing every choice of which m_q of each question's n_q + m_q rollouts (a_q + b_q
    of them correct) fall in the last window, all choices equally likely: the fraction with at least as many
    correct rollouts in the last window as observed."""
    per_question = []  # per question: the last window's correct rollouts, one entry per choice of its rollouts
    for a, n, b, m in strata:
        correct = [True] * (a + b) + [False] * (n + m - a - b)
        per_question.append([sum(correct[i] for i in chosen) for chosen in combinations(range(n + m), m)])
    observed = sum(b for _, _, b, _ in strata)
    outcomes = [sum(choice) for choice in product(*per_question)]
    return Fraction(sum(total >= observed for total in outcomes), len(outcomes))


def counted_p(strata: list[Stratum]) -> Fraction:
    """The same probability by counting ways in integers: ways[s] = the number of choices (of which rollouts fall
    in the last window, per question) putting s correct rollouts there, built one question at a time."""
    ways = [1]
    for a, n, b, m in strata:
        correct, total = a + b, n + m
        here = [comb(correct, x) * comb(total - correct, m - x) for x in range(m + 1)]
        ways = [
            sum(ways[s - x] * here[x] for x in range(m + 1) if 0 <= s - x < len(ways)) for s in range(len(ways) + m)
        ]
    observed = sum(b for _, _, b, _ in strata)
    choices = prod(comb(n + m, m) for _, n, _, m in strata)
    assert sum(ways) == choices
    return Fraction(sum(ways[observed:]), choices)


HAND_MADE = [
    pytest.param([(1, 4, 4, 4)], Fraction(5, 70), id="one-stratum-fisher"),
    pytest.param([(1, 4, 4, 4), (3, 3, 2, 2)], Fraction(5, 70), id="plus-all-correct-stratum"),
    pytest.param([(1, 4, 4, 4), (0, 3, 0, 2)], Fraction(5, 70), id="plus-all-wrong-stratum"),
    pytest.param([(4, 4, 0, 4)], Fraction(1), id="after-worse-p-1"),
    pytest.param([(0, 0, 2, 3)], Fraction(1), id="n-zero"),
    pytest.param([(2, 3, 0, 0)], Fraction(1), id="m-zero"),
    pytest.param([(1, 4, 4, 4), (0, 0, 2, 3), (2, 3, 0, 0)], Fraction(5, 70), id="fisher-plus-one-sided-strata"),
    pytest.param([(0, 4, 4, 4)], Fraction(1, 70), id="extreme-rise"),
    pytest.param([(1, 3, 2, 2)], Fraction(3, 10), id="unequal-windows"),
]


@pytest.mark.parametrize(("strata", "expected"), HAND_MADE)
def test_hand_made_strata_match_their_exact_answer_and_the_brute_force(strata, expected):
    assert brute_force_p(strata) == expected
    assert counted_p(strata) == expected
    assert stratified_rise_p_value(strata) == pytest.approx(float(expected), abs=1e-15)


def test_one_stratum_by_hand():
    # N=8 rollouts, K=5 correct, 4 in the last window holding 4 correct: C(5,4)·C(3,0)/C(8,4) = 5/70.
    assert stratified_rise_p_value([(1, 4, 4, 4)]) == pytest.approx(5 / 70, abs=1e-15)
    # N=5, K=3, a last window of 2 holding both correct: C(3,2)·C(2,0)/C(5,2) = 3/10.
    assert stratified_rise_p_value([(1, 3, 2, 2)]) == pytest.approx(3 / 10, abs=1e-15)


@pytest.mark.parametrize(
    "strata",
    [
        [(1, 3, 2, 2), (0, 2, 3, 4)],
        [(2, 5, 1, 1), (1, 2, 2, 3), (0, 1, 1, 2)],
        [(1, 2, 3, 5), (4, 4, 2, 2), (0, 3, 1, 1)],
        [(3, 4, 1, 4), (2, 3, 0, 3)],  # the last window worse than the first: p near 1
        [(0, 0, 1, 2), (1, 3, 2, 3)],
    ],
)
def test_unequal_strata_match_the_brute_force(strata):
    exact = brute_force_p(strata)
    assert counted_p(strata) == exact
    assert stratified_rise_p_value(strata) == pytest.approx(float(exact), abs=1e-15)


def test_a_fall_gives_p_near_one():
    p = stratified_rise_p_value([(3, 4, 1, 4), (2, 3, 0, 3)])
    assert 0.95 < p <= 1.0
    assert p == pytest.approx(float(brute_force_p([(3, 4, 1, 4), (2, 3, 0, 3)])), abs=1e-15)


def test_a_constant_stratum_changes_nothing():
    base = [(1, 4, 3, 4), (0, 2, 2, 3)]
    p = stratified_rise_p_value(base)
    for constant in [(3, 3, 2, 2), (0, 5, 0, 1), (0, 0, 4, 4), (2, 2, 0, 0)]:
        assert stratified_rise_p_value([*base, constant]) == p
        assert stratified_rise_p_value([constant, *base]) == p


def test_no_strata_is_certain():
    assert stratified_rise_p_value([]) == 1.0


@pytest.mark.parametrize("stratum", [(5, 4, 0, 4), (0, 4, 5, 4), (-1, 4, 0, 4), (0, 4, -1, 4), (0, 0, 0, 0)])
def test_counts_that_are_not_counts_are_refused(stratum):
    with pytest.raises(ValueError, match="not counts of correct rollouts"):
        stratified_rise_p_value([(1, 4, 4, 4), stratum])


def test_one_stratum_is_fishers_exact_test():
    stats = pytest.importorskip("scipy.stats")
    for a, n, b, m in [(1, 4, 4, 4), (1, 3, 2, 2), (2, 7, 5, 6), (4, 4, 0, 4), (6, 12, 10, 12)]:
        # rows: last window, first window; columns: correct, wrong. "greater": P(top-left ≥ observed).
        _, fisher = stats.fisher_exact([[b, m - b], [a, n - a]], alternative="greater")
        assert stratified_rise_p_value([(a, n, b, m)]) == pytest.approx(fisher, rel=1e-9, abs=1e-15)


def small_strata(max_size: int) -> st.SearchStrategy[list[Stratum]]:
    def stratum(sizes: tuple[int, int]) -> st.SearchStrategy[Stratum]:
        n, m = sizes
        return st.tuples(st.integers(0, n), st.just(n), st.integers(0, m), st.just(m))

    sizes = st.tuples(st.integers(0, max_size), st.integers(0, max_size)).filter(lambda s: s[0] + s[1] > 0)
    return st.lists(sizes.flatmap(stratum), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(strata=small_strata(3))
def test_any_small_case_matches_the_brute_force(strata):
    assume(prod(comb(n + m, m) for _, n, _, m in strata) <= 3000)
    p = stratified_rise_p_value(strata)
    assert 0.0 <= p <= 1.0
    assert p == pytest.approx(float(brute_force_p(strata)), abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(strata=small_strata(12))
def test_larger_cases_match_the_count_of_ways(strata):
    p = stratified_rise_p_value(strata)
    assert 0.0 <= p <= 1.0
    assert p == pytest.approx(float(counted_p(strata)), rel=1e-12, abs=1e-300)


# --- learning_check ---------------------------------------------------------------------------------------------

# A run's M correct rollouts (of 4) per question, steps 0-9.
RUN = {
    "q54": [3, 3, 4, 3, 4, 4, 4, 4, 4, 4],
    "q334": [0] * 10,
    "q497": [3, 4, 0, 3, 3, 3, 1, 4, 3, 4],
    "q538": [2, 3, 1, 2, 2, 2, 3, 4, 4, 4],
}


def run_rows() -> list[dict]:
    return [{"step": step, "questions": {q: [c[step], 4] for q, c in RUN.items()}} for step in range(10)]


def test_the_runs_first_third_against_its_last():
    check = learning_check(run_rows())
    assert check is not None
    assert (check.first_steps, check.last_steps, check.questions) == ((0, 2), (7, 9), 4)
    assert (check.first_correct, check.first_rollouts, check.last_correct, check.last_rollouts) == (23, 48, 35, 48)
    # (a, n, b, m) per question, summed by hand from RUN.
    strata = [(10, 12, 12, 12), (0, 12, 0, 12), (7, 12, 11, 12), (6, 12, 12, 12)]
    expected = float(counted_p(strata))
    assert check.p_value == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert 2e-4 < check.p_value < 3e-4
    line = check.line()
    for text in ("4 questions", "steps 0-2 23/48 (0.479)", "steps 7-9 35/48 (0.729)", "+0.250", "p = 0.000268"):
        assert text in line, (text, line)
    assert f"p = {check.p_value:.3g}" in line


@pytest.mark.parametrize(
    ("steps", "window"), [(2, 1), (3, 1), (5, 1), (6, 2), (8, 2), (9, 3), (10, 3), (11, 3), (12, 4)]
)
def test_the_window_is_a_third_of_the_steps_at_least_one(steps, window):
    rows = [{"step": 100 + i, "questions": {"q": [i % 3, 2]}} for i in range(steps)]
    check = learning_check(rows)
    assert check is not None
    assert check.first_steps == (100, 100 + window - 1)
    assert check.last_steps == (100 + steps - window, 100 + steps - 1)
    assert check.first_rollouts == check.last_rollouts == 2 * window
    assert check.first_correct == sum(i % 3 for i in range(window))
    assert check.last_correct == sum(i % 3 for i in range(steps - window, steps))


def test_only_questions_met_in_both_windows_count():
    rows = [
        {"step": 0, "questions": {"both": [1, 4], "first_only": [4, 4]}},
        {"step": 1, "questions": {"middle": [4, 4], "both": [4, 4]}},
        {"step": 2, "questions": {"both": [3, 4], "last_only": [0, 4]}},
    ]
    check = learning_check(rows)
    assert check is not None
    assert (check.questions, check.first_correct, check.first_rollouts) == (1, 1, 4)
    assert (check.last_correct, check.last_rollouts) == (3, 4)
    assert check.p_value == pytest.approx(float(brute_force_p([(1, 4, 3, 4)])), abs=1e-15)
    assert "on the same 1 question:" in check.line() and "step 0 1/4" in check.line() and "step 2 3/4" in check.line()


def test_counts_are_summed_over_a_windows_steps():
    rows = [{"step": s, "questions": {"q1": [c, 4], "q2": [4 - c, 5]}} for s, c in enumerate([0, 1, 2, 2, 3, 4])]
    check = learning_check(rows)  # window 2: steps 0-1 and 4-5
    assert check is not None
    assert (check.first_correct, check.first_rollouts) == (0 + 1 + 4 + 3, 18)
    assert (check.last_correct, check.last_rollouts) == (3 + 4 + 1 + 0, 18)
    assert check.p_value == pytest.approx(float(counted_p([(1, 8, 7, 8), (7, 10, 1, 10)])), rel=1e-12)


def test_rows_without_questions_are_ignored():
    rows = [
        {"step": 0},
        {"step": 1, "questions": {}},
        {"step": 2, "questions": {"q": [0, 4]}},
        {"step": 3, "questions": None},
        {"step": 4, "questions": {"q": [4, 4]}},
        {"step": 5},
    ]
    check = learning_check(rows)  # two usable rows: window 1, steps 2 and 4
    assert check is not None
    assert (check.first_steps, check.last_steps) == ((2, 2), (4, 4))
    assert (check.first_correct, check.last_correct) == (0, 4)
    assert check.p_value == pytest.approx(1 / 70, abs=1e-15)


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [{"step": 0, "questions": {"q": [1, 4]}}],
        [{"step": 0, "questions": {"q": [1, 4]}}, {"step": 1}, {"step": 2, "questions": {}}],
        [{"step": 0, "questions": {"a": [1, 4]}}, {"step": 1, "questions": {"b": [4, 4]}}],
        [{"step": s, "questions": {f"q{s}": [1, 4]}} for s in range(9)],  # a new question every step
    ],
)
def test_nothing_like_for_like_is_none(rows):
    assert learning_check(rows) is None


def test_as_dict_is_the_checks_fields():
    check = learning_check(run_rows())
    assert check is not None
    assert check.as_dict() == {
        "first_steps": [0, 2],
        "last_steps": [7, 9],
        "questions": 4,
        "first_correct": 23,
        "first_rollouts": 48,
        "last_correct": 35,
        "last_rollouts": 48,
        "p_value": check.p_value,
    }
    fields = {**check.as_dict(), "first_steps": (0, 2), "last_steps": (7, 9)}
    assert LearningCheck(**fields) == check


def test_a_question_without_rollouts_is_not_compared():
    rows = [{"step": s, "questions": {"empty": [0, 0], "q": [s, 2]}} for s in range(3)]
    check = learning_check(rows)
    assert check is not None and check.questions == 1


def test_a_window_without_rollouts_still_reads():
    check = learning_check([{"step": 0, "questions": {"q": [0, 0]}}, {"step": 1, "questions": {"q": [1, 2]}}])
    assert check is None or "p = " in check.line()


# --- summary.json -----------------------------------------------------------------------------------------------


def test_summary_json_carries_the_learning_check(tmp_path):
    rows = [{**row, "main_correct": float("nan")} for row in run_rows()]
    path = write_summary_json(rows, tmp_path / "summary.json", "r1", 12.5)
    document = json.loads(path.read_text())
    assert (document["run_id"], document["seconds"], len(document["steps"])) == ("r1", 12.5, 10)
    assert document["steps"][0]["main_correct"] is None
    check = learning_check(rows)
    assert check is not None
    assert document["learning"] == check.as_dict()
    assert (document["learning"]["first_correct"], document["learning"]["last_correct"]) == (23, 35)
    assert document["learning"]["p_value"] == check.p_value  # JSON keeps the float exactly


def test_summary_json_learning_is_null_without_like_for_like(tmp_path):
    rows = [{"step": 0, "questions": {"a": [1, 4]}}, {"step": 1, "questions": {"b": [4, 4]}}, {"step": 2}]
    document = json.loads(write_summary_json(rows, tmp_path / "summary.json", "r2").read_text())
    assert "learning" in document and document["learning"] is None
    assert document["seconds"] is None


def test_a_long_run_is_checked():
    """8 questions x 8 rollouts x 300 steps: exact fractions took minutes here (the suite's timeout would stop a
    regression); floats through log-binomials take milliseconds, and still sum to a probability."""
    rows = [{"step": s, "questions": {f"q{i}": [(s + i) % 9, 8] for i in range(8)}} for s in range(300)]
    check = learning_check(rows)
    assert check is not None and check.first_rollouts == check.last_rollouts == 100 * 8 * 8
    assert 0.0 <= check.p_value <= 1.0


def test_the_line_says_no_rise_when_m_got_worse_or_stayed():
    worse = learning_check([{"step": 0, "questions": {"q": [3, 4]}}, {"step": 1, "questions": {"q": [1, 4]}}])
    same = learning_check([{"step": 0, "questions": {"q": [2, 4]}}, {"step": 1, "questions": {"q": [2, 4]}}])
    assert worse is not None and worse.line().endswith("-0.500; no rise")
    assert same is not None and same.line().endswith("+0.000; no rise")
    rose = learning_check([{"step": 0, "questions": {"q": [0, 4]}}, {"step": 1, "questions": {"q": [4, 4]}}])
    assert rose is not None and "p = 0.0143 that it rises this much without learning" in rose.line()  # 1/70
